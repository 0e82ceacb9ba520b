// The SIF reader and writer: a built image round-trips field by field (checked against the raw
// bytes and against unsquashfs's own listing of the partition), and each kind of corruption gives
// its own error naming the file and the field.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "sif_image.hpp"
#include "test_image.hpp"

namespace fs = std::filesystem;
using namespace mlpt::sif;

namespace {

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), {});
}
void spit(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
uint64_t le(const std::vector<uint8_t>& b, size_t off, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[off + i]) << (8 * i);
  return v;
}
void put_le(std::vector<uint8_t>& b, size_t off, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// Reads a corrupted copy of the test image; returns the error.
SifError corrupt(const std::string& name, const std::function<void(std::vector<uint8_t>&)>& edit) {
  auto bytes = slurp(sandbox_test::test_image());
  edit(bytes);
  fs::path p = sandbox_test::scratch_dir() / (name + ".sif");
  spit(p, bytes);
  try {
    read_sif(p);
  } catch (const SifError& e) {
    CHECK(std::string(e.what()).find(p.string()) != std::string::npos);  // names the file
    return e;
  }
  FAIL("corrupt image " << name << " was accepted");
  return SifError(ErrorKind::Io, "");
}

}  // namespace

TEST_CASE("a built SIF round-trips every header and descriptor field") {
  std::string path = sandbox_test::test_image();
  SifImage img = read_sif(path);
  auto raw = slurp(path);
  const Header& h = img.header;
  CHECK(h.launch == "#!/usr/bin/env run-singularity\n");
  CHECK(std::memcmp(raw.data() + 32, "SIF_MAGIC\0", 10) == 0);
  CHECK(h.magic == "SIF_MAGIC");
  CHECK(h.version == "01");
  CHECK(std::memcmp(raw.data() + 42, "01\0", 3) == 0);
  CHECK(h.arch == host_arch_code());
  CHECK(h.ctime == 1700000000);
  CHECK(h.mtime == 1700000000);
  CHECK(le(raw, 64, 8) == 1700000000u);
  CHECK(h.dtotal == 48);
  CHECK(h.dfree == 47);
  CHECK(le(raw, 88, 8) == 48u);
  CHECK(h.descr_offset == 4096);
  CHECK(h.descr_length == 48 * 585);
  CHECK(h.data_offset == 32768);
  REQUIRE(img.descriptors.size() == 1);
  const Descriptor& d = img.primary_partition();
  CHECK(d.data_type == 0x4004);
  CHECK(le(raw, 4096, 4) == 0x4004u);
  CHECK(d.used);
  CHECK(d.id == 1);
  CHECK(d.group_id == 0xf0000001u);
  CHECK(d.linked_id == 0);
  CHECK(d.offset == 32768);
  CHECK(le(raw, 4096 + 17, 8) == 32768u);
  CHECK(static_cast<uint64_t>(d.offset + d.size) == img.file_size);
  CHECK(d.store_length == d.size);
  CHECK(h.data_length == d.size);
  CHECK(d.ctime == 1700000000);
  CHECK(d.name == "rootfs.squashfs");
  CHECK(d.fs_type() == 1);
  CHECK(d.part_type() == 2);
  CHECK(d.part_arch() == host_arch_code());
  CHECK(img.squashfs_bytes_used > 0);
  CHECK(img.squashfs_bytes_used <= static_cast<uint64_t>(d.size));
  CHECK(std::memcmp(raw.data() + d.offset, "hsqs", 4) == 0);

  // unsquashfs, reading the partition by offset, lists exactly the source tree.
  std::string listing = run("unsquashfs -o " + std::to_string(d.offset) + " -l " + path + " 2>&1");
  std::set<std::string> listed, expected = {"squashfs-root"};
  size_t at = 0;
  while (at < listing.size()) {
    size_t e = listing.find('\n', at);
    if (e == std::string::npos) e = listing.size();
    if (e > at) listed.insert(listing.substr(at, e - at));
    at = e + 1;
  }
  fs::path src = sandbox_test::scratch_dir() / "rootfs";
  for (auto& e : fs::recursive_directory_iterator(src))
    expected.insert("squashfs-root/" + fs::relative(e.path(), src).string());
  CHECK(listed == expected);
}

TEST_CASE("building the same tree twice gives the same bytes") {
  std::string a = sandbox_test::test_image();
  fs::path b = sandbox_test::scratch_dir() / "again.sif";
  BuildOptions o;
  o.time = 1700000000;
  build_sif(sandbox_test::scratch_dir() / "rootfs", b, o);
  CHECK(slurp(a) == slurp(b));
}

TEST_CASE("missing and non-SIF files are refused with their own error") {
  try {
    read_sif(sandbox_test::scratch_dir() / "nope.sif");
    FAIL("accepted a missing file");
  } catch (const SifError& e) {
    CHECK(e.kind() == ErrorKind::Io);
    CHECK(std::string(e.what()).find("does not exist") != std::string::npos);
  }
  CHECK(corrupt("magic", [](auto& b) { b[32] = 'X'; }).kind() == ErrorKind::BadMagic);
  auto v = corrupt("version", [](auto& b) { b[43] = '9'; });
  CHECK(v.kind() == ErrorKind::BadVersion);
  CHECK(std::string(v.what()).find("'version'") != std::string::npos);
}

TEST_CASE("truncated images are refused, naming what is cut off") {
  auto header = corrupt("trunc-header", [](auto& b) { b.resize(100); });
  CHECK(header.kind() == ErrorKind::Truncated);
  CHECK(std::string(header.what()).find("global header") != std::string::npos);
  auto table = corrupt("trunc-table", [](auto& b) { b.resize(20000); });
  CHECK(table.kind() == ErrorKind::Truncated);
  CHECK(std::string(table.what()).find("descriptor table") != std::string::npos);
  auto data = corrupt("trunc-data", [](auto& b) { b.resize(b.size() - 100); });
  CHECK(data.kind() == ErrorKind::Truncated);
  CHECK(std::string(data.what()).find("'datalen'") != std::string::npos);
}

TEST_CASE("descriptor offsets beyond the file and overlapping objects are refused") {
  auto beyond = corrupt("beyond", [](auto& b) { put_le(b, 4096 + 17, b.size() + 4096, 8); });
  CHECK(beyond.kind() == ErrorKind::BadDescriptor);
  CHECK(std::string(beyond.what()).find("'offset'") != std::string::npos);
  CHECK(std::string(beyond.what()).find("beyond the end of the file") != std::string::npos);

  auto overlap = corrupt("overlap", [](auto& b) {
    // A second used descriptor (id 2) whose object overlaps the partition's bytes.
    size_t d2 = 4096 + 585;
    put_le(b, d2 + 0, 0x4007, 4);
    b[d2 + 4] = 1;
    put_le(b, d2 + 5, 2, 4);
    put_le(b, d2 + 17, 32768 + 64, 8);
    put_le(b, d2 + 25, 128, 8);
    put_le(b, 80, 46, 8);  // dfree
  });
  CHECK(overlap.kind() == ErrorKind::Overlap);
  CHECK(std::string(overlap.what()).find("overlaps") != std::string::npos);
}

TEST_CASE("a partition that is not squashfs is refused") {
  auto fst = corrupt("fstype", [](auto& b) { put_le(b, 4096 + 201, 2, 4); });
  CHECK(fst.kind() == ErrorKind::WrongFsType);
  CHECK(std::string(fst.what()).find("Ext3") != std::string::npos);
  auto sb = corrupt("superblock", [](auto& b) { std::memset(b.data() + 32768, 0, 4); });
  CHECK(sb.kind() == ErrorKind::BadSquashfs);
  auto nopart = corrupt("nopart", [](auto& b) { put_le(b, 4096 + 205, 3, 4); });  // part type Data
  CHECK(nopart.kind() == ErrorKind::NoPartition);
}

TEST_CASE("mlpt-sif build and inspect work from the command line") {
  std::string tool = std::string(MLPT_BUILD_DIR) + "/bin/mlpt-sif";
  if (!fs::exists(tool)) {
    WARN("mlpt-sif not built; skipping");
    return;
  }
  std::string reference = sandbox_test::test_image();  // also makes the rootfs
  fs::path out = sandbox_test::scratch_dir() / "cli.sif";
  std::string built = run(tool + " build " + (sandbox_test::scratch_dir() / "rootfs").string() + " " + out.string() + " --time 1700000000 2>&1");
  CHECK(built.find("squashfs partition at offset 32768") != std::string::npos);
  CHECK(slurp(out) == slurp(sandbox_test::test_image()));
  std::string json = run(tool + " inspect --json " + out.string());
  CHECK(json.find("\"parttype\": \"*System\"") != std::string::npos);
  std::string bad = run(tool + " inspect " + (sandbox_test::scratch_dir() / "missing.sif").string() + " 2>&1; echo rc=$?");
  CHECK(bad.find("rc=1") != std::string::npos);
}
