#include "sif_image.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

extern char** environ;

namespace mlpt::sif {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(ErrorKind kind, const fs::path& path, const std::string& what) {
  throw SifError(kind, path.string() + ": " + what);
}

// Reads exactly `n` bytes at `off`; the caller has checked that they are inside the file.
void read_at(int fd, const fs::path& path, uint64_t off, void* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(ErrorKind::Io, path, std::string("read failed: ") + std::strerror(errno));
    if (r == 0) fail(ErrorKind::Truncated, path, "file ended while reading at byte " + std::to_string(off + done));
    done += static_cast<size_t>(r);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// a + b <= limit, without overflow; a, b already known to be >= 0.
bool fits(int64_t a, int64_t b, uint64_t limit) {
  return static_cast<uint64_t>(a) <= limit && static_cast<uint64_t>(b) <= limit - static_cast<uint64_t>(a);
}

}  // namespace

SifImage read_sif(const fs::path& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    if (errno == ENOENT) fail(ErrorKind::Io, path, "image file does not exist");
    fail(ErrorKind::Io, path, std::string("cannot open image: ") + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(ErrorKind::Io, path, std::string("stat failed: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(ErrorKind::Io, path, "not a regular file");

  SifImage img;
  img.path = path;
  img.file_size = static_cast<uint64_t>(st.st_size);
  if (img.file_size < kHeaderSize)
    fail(ErrorKind::Truncated, path,
         "truncated: the global header needs " + std::to_string(kHeaderSize) + " bytes, the file has " +
             std::to_string(img.file_size));
  uint8_t hbuf[kHeaderSize];
  read_at(f.fd, path, 0, hbuf, kHeaderSize);
  Header& h = img.header;
  h = decode_header(hbuf);

  if (std::memcmp(hbuf + kMagicOff, "SIF_MAGIC", 9) != 0)
    fail(ErrorKind::BadMagic, path, "not a SIF file: header field 'magic' is not \"SIF_MAGIC\"");
  if (h.version != kVersion)
    fail(ErrorKind::BadVersion, path, "header field 'version' is \"" + h.version + "\", this reader knows \"01\"");
  if (h.dtotal <= 0 || h.dtotal > 1 << 20)
    fail(ErrorKind::BadHeader, path, "header field 'dtotal' (descriptor count) is " + std::to_string(h.dtotal));
  if (h.dfree < 0 || h.dfree > h.dtotal)
    fail(ErrorKind::BadHeader, path,
         "header field 'dfree' is " + std::to_string(h.dfree) + ", outside 0.." + std::to_string(h.dtotal));
  const int64_t table_bytes = h.dtotal * static_cast<int64_t>(kDescriptorSize);
  if (h.descr_offset < static_cast<int64_t>(kHeaderSize))
    fail(ErrorKind::BadHeader, path,
         "header field 'descroff' is " + std::to_string(h.descr_offset) + ", inside the global header");
  if (h.descr_length < table_bytes)
    fail(ErrorKind::BadHeader, path,
         "header field 'descrlen' is " + std::to_string(h.descr_length) + ", smaller than dtotal * " +
             std::to_string(kDescriptorSize) + " = " + std::to_string(table_bytes));
  if (!fits(h.descr_offset, table_bytes, img.file_size))
    fail(ErrorKind::Truncated, path,
         "truncated: the descriptor table (descroff " + std::to_string(h.descr_offset) + " + " +
             std::to_string(table_bytes) + " bytes) ends past the end of the file (" +
             std::to_string(img.file_size) + " bytes)");
  if (h.data_offset < 0 || h.data_length < 0 || !fits(h.data_offset, h.data_length, img.file_size))
    fail(ErrorKind::Truncated, path,
         "truncated: the data section (header fields 'dataoff' " + std::to_string(h.data_offset) +
             " + 'datalen' " + std::to_string(h.data_length) + ") ends past the end of the file (" +
             std::to_string(img.file_size) + " bytes)");
  if (h.data_offset < h.descr_offset + table_bytes && h.data_length > 0)
    fail(ErrorKind::Overlap, path,
         "header field 'dataoff' " + std::to_string(h.data_offset) + " lies inside the descriptor table");

  std::vector<uint8_t> table(static_cast<size_t>(table_bytes));
  read_at(f.fd, path, static_cast<uint64_t>(h.descr_offset), table.data(), table.size());
  std::vector<size_t> table_index;
  for (int64_t i = 0; i < h.dtotal; ++i) {
    Descriptor d = decode_descriptor(table.data() + i * kDescriptorSize);
    if (!d.used) continue;
    const std::string where = "descriptor " + std::to_string(i) + " (id " + std::to_string(d.id) + ")";
    if (d.offset < 0 || d.size < 0)
      fail(ErrorKind::BadDescriptor, path, where + ": negative 'offset' or 'size'");
    if (!fits(d.offset, d.size, img.file_size))
      fail(ErrorKind::BadDescriptor, path,
           where + ": field 'offset' " + std::to_string(d.offset) + " + 'size' " + std::to_string(d.size) +
               " lies beyond the end of the file (" + std::to_string(img.file_size) + " bytes)");
    if (d.size > 0 && (d.offset < h.data_offset || d.offset + d.size > h.data_offset + h.data_length))
      fail(ErrorKind::BadDescriptor, path,
           where + ": object [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.size) +
               ") lies outside the data section [" + std::to_string(h.data_offset) + ", " +
               std::to_string(h.data_offset + h.data_length) + ")");
    for (const Descriptor& o : img.descriptors) {
      if (o.id == d.id) fail(ErrorKind::BadDescriptor, path, where + ": field 'id' repeats another descriptor's");
      if (d.size > 0 && o.size > 0 && d.offset < o.offset + o.size && o.offset < d.offset + d.size)
        fail(ErrorKind::Overlap, path,
             where + ": object [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.size) +
                 ") overlaps the object of descriptor id " + std::to_string(o.id));
    }
    img.descriptors.push_back(std::move(d));
  }
  if (static_cast<int64_t>(img.descriptors.size()) != h.dtotal - h.dfree)
    fail(ErrorKind::BadHeader, path,
         "header says " + std::to_string(h.dtotal - h.dfree) + " descriptors are used (dtotal - dfree), the table has " +
             std::to_string(img.descriptors.size()));

  // The primary system partition; else the only system partition.
  std::optional<size_t> primary, system;
  size_t systems = 0;
  for (size_t i = 0; i < img.descriptors.size(); ++i) {
    const Descriptor& d = img.descriptors[i];
    if (d.data_type != static_cast<int32_t>(DataType::Partition)) continue;
    if (d.part_type() == static_cast<int32_t>(PartType::PrimarySystem)) {
      if (primary) fail(ErrorKind::BadDescriptor, path, "more than one primary system partition");
      primary = i;
    } else if (d.part_type() == static_cast<int32_t>(PartType::System)) {
      system = i;
      ++systems;
    }
  }
  if (!primary && systems == 1) primary = system;
  if (!primary) fail(ErrorKind::NoPartition, path, "no primary system partition (data type 0x4004, part type *System)");
  img.primary = *primary;
  const Descriptor& p = img.descriptors[*primary];
  if (p.fs_type() != static_cast<int32_t>(FsType::Squashfs))
    fail(ErrorKind::WrongFsType, path,
         "primary partition (id " + std::to_string(p.id) + ") has fs type " + fs_type_name(p.fs_type()) + " (" +
             std::to_string(p.fs_type()) + "), expected Squashfs (1)");
  // Squashfs superblock: magic "hsqs" at 0, bytes_used (u64) at 40, 96 bytes in all.
  if (p.size < 96)
    fail(ErrorKind::BadSquashfs, path,
         "primary partition (id " + std::to_string(p.id) + ") is " + std::to_string(p.size) +
             " bytes, smaller than a squashfs superblock");
  uint8_t sb[96];
  read_at(f.fd, path, static_cast<uint64_t>(p.offset), sb, sizeof sb);
  if (std::memcmp(sb, "hsqs", 4) != 0)
    fail(ErrorKind::BadSquashfs, path,
         "no squashfs superblock magic \"hsqs\" at partition offset " + std::to_string(p.offset));
  uint64_t used = 0;
  for (int i = 0; i < 8; ++i) used |= static_cast<uint64_t>(sb[40 + i]) << (8 * i);
  if (used > static_cast<uint64_t>(p.size))
    fail(ErrorKind::BadSquashfs, path,
         "squashfs superblock says " + std::to_string(used) + " bytes used, the partition holds " +
             std::to_string(p.size));
  img.squashfs_bytes_used = used;
  return img;
}

uint64_t content_hash(const fs::path& path, uint64_t offset, uint64_t size) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) fail(ErrorKind::Io, path, std::string("cannot open: ") + std::strerror(errno));
  uint64_t h = 1469598103934665603ull;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t done = 0;
  while (done < size) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    read_at(f.fd, path, offset + done, buf.data(), n);
    for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * 1099511628211ull;
    done += n;
  }
  return h;
}

void write_sif(const fs::path& squashfs, const fs::path& out, int64_t time) {
  std::error_code ec;
  uint64_t size = fs::file_size(squashfs, ec);
  if (ec) fail(ErrorKind::Io, squashfs, "cannot stat: " + ec.message());
  uint64_t hash = content_hash(squashfs, 0, size);

  Header h;
  h.launch = kLaunchScript;
  h.magic = kMagic;
  h.version = kVersion;
  h.arch = host_arch_code();
  // A version-4-shaped UUID derived from the content, so identical trees give identical images.
  uint64_t h2 = (hash ^ 0x9e3779b97f4a7c15ull) * 1099511628211ull;
  for (int i = 0; i < 8; ++i) h.id[i] = static_cast<uint8_t>(hash >> (8 * i));
  for (int i = 0; i < 8; ++i) h.id[8 + i] = static_cast<uint8_t>(h2 >> (8 * i));
  h.id[6] = static_cast<uint8_t>((h.id[6] & 0x0f) | 0x40);
  h.id[8] = static_cast<uint8_t>((h.id[8] & 0x3f) | 0x80);
  h.ctime = h.mtime = time;
  h.dtotal = kDefaultDescriptors;
  h.dfree = kDefaultDescriptors - 1;
  h.descr_offset = kDescriptorsStart;
  h.descr_length = kDefaultDescriptors * static_cast<int64_t>(kDescriptorSize);
  h.data_offset = kDataStart;

  Descriptor d;
  d.data_type = static_cast<int32_t>(DataType::Partition);
  d.used = true;
  d.id = 1;
  d.group_id = kDefaultGroup;
  d.linked_id = 0;
  d.offset = kDataStart;  // already aligned to kObjectAlign
  d.size = static_cast<int64_t>(size);
  d.store_length = d.size;  // no alignment padding before the first object
  d.ctime = d.mtime = time;
  d.name = "rootfs.squashfs";
  int32_t fst = static_cast<int32_t>(FsType::Squashfs), pt = static_cast<int32_t>(PartType::PrimarySystem);
  for (int i = 0; i < 4; ++i) d.extra[i] = static_cast<uint8_t>(static_cast<uint32_t>(fst) >> (8 * i));
  for (int i = 0; i < 4; ++i) d.extra[4 + i] = static_cast<uint8_t>(static_cast<uint32_t>(pt) >> (8 * i));
  std::memcpy(d.extra.data() + 8, h.arch.data(), 2);
  h.data_length = d.store_length;

  std::vector<uint8_t> front(static_cast<size_t>(kDataStart), 0);
  encode_header(h, front.data());
  encode_descriptor(d, front.data() + kDescriptorsStart);

  fs::path tmp = out;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    std::ifstream in(squashfs, std::ios::binary);
    if (!o || !in) fail(ErrorKind::Io, out, "cannot write the image (or read " + squashfs.string() + ")");
    o.write(reinterpret_cast<const char*>(front.data()), static_cast<std::streamsize>(front.size()));
    o << in.rdbuf();
    o.flush();
    if (!o) fail(ErrorKind::Io, out, "write failed");
  }
  fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec, ec);
  fs::rename(tmp, out, ec);
  if (ec) fail(ErrorKind::Io, out, "cannot move the image into place: " + ec.message());
}

namespace {

// Runs argv, returns (status, merged output).
std::pair<int, std::string> run_tool(const std::vector<std::string>& argv) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw SifError(ErrorKind::Io, "pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  std::string out;
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(p[0]);
  if (rc != 0) return {-1, std::string("cannot run ") + argv[0] + ": " + std::strerror(rc)};
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace

SifImage build_sif(const fs::path& dir, const fs::path& out, const BuildOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(ErrorKind::Io, dir, "not a directory");
  int64_t time = options.time;
  if (time < 0) {
    if (const char* e = std::getenv("SOURCE_DATE_EPOCH"); e && *e) time = std::atoll(e);
    else time = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  }
  fs::path sq = out;
  sq += ".squashfs.tmp." + std::to_string(::getpid());
  fs::remove(sq, ec);
  std::vector<std::string> argv = {options.mksquashfs, dir.string(), sq.string(), "-noappend",
                                   "-comp", options.compression, "-all-root", "-no-xattrs",
                                   "-mkfs-time", std::to_string(time), "-all-time", std::to_string(time),
                                   "-no-progress", "-quiet"};
  if (options.processors > 0) {
    argv.push_back("-processors");
    argv.push_back(std::to_string(options.processors));
  }
  auto [status, output] = run_tool(argv);
  if (status != 0) {
    fs::remove(sq, ec);
    fail(ErrorKind::Io, dir, "mksquashfs failed (status " + std::to_string(status) + "): " + output);
  }
  try {
    write_sif(sq, out, time);
  } catch (...) {
    fs::remove(sq, ec);
    throw;
  }
  fs::remove(sq, ec);
  return read_sif(out);
}

}  // namespace mlpt::sif
