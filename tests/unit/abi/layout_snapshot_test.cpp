// Every minor's struct layouts against abi/snapshots/layouts.txt, and each minor a prefix of the
// next (mlpt.h, Versions: a minor only appends). The layouts are measured, not assumed: the test
// writes a C program that prints offsetof and sizeof of every field the headers of a version declare,
// compiles it against that version's headers (abi/snapshots/1.0, 1.1, abi/include) and runs it.
// A changed snapshot is a deliberate act: MLPT_WRITE_ABI_LAYOUTS=1 rewrites it from the headers.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "header_structs.hpp"
#include "mlpt/mlpt.h"

namespace fs = std::filesystem;

namespace {

const fs::path kAbi = fs::path(MLPT_SOURCE_DIR) / "abi";

struct Version {
  std::string name;  // "1.0"
  fs::path include;  // the folder that holds mlpt/*.h
};

std::vector<Version> versions() {
  return {{"1.0", kAbi / "snapshots" / "1.0"},
          {"1.1", kAbi / "snapshots" / "1.1"},
          {"1." + std::to_string(MLPT_ABI_VERSION_MINOR), kAbi / "include"}};
}

// An int or an int-sized enum of the ABI: 1.2 typed fields that were int (trainer device_type,
// reward episode_end) without changing their layout or values.
std::string type_class(const std::string& type, const abi_test::Header& h) {
  if (type == "int" || type == "int32_t" || h.enums.count(type) || type == "DLDeviceType") return "int32";
  return type;
}

// "<version> <struct> <field> <offset> <size> <type>" for every field, in declaration order.
std::vector<std::string> measure(const Version& v) {
  std::vector<fs::path> files;
  const abi_test::Header h = abi_test::parse_headers(v.include, &files);
  const fs::path dir =
      fs::temp_directory_path() / ("mlpt-abi-layout-" + std::to_string(getpid()) + "-" + v.name);
  fs::create_directories(dir);
  std::ofstream c(dir / "layout.c");
  c << "#include <stddef.h>\n#include <stdio.h>\n";
  for (const auto& f : files) c << "#include \"mlpt/" << f.filename().string() << "\"\n";
  c << "int main(void) {\n";
  for (const auto& name : h.struct_order)
    for (const auto& f : h.structs.at(name))
      c << "  printf(\"%zu %zu\\n\", offsetof(" << name << ", " << f.name << "), sizeof(((" << name
        << "*)0)->" << f.name << "));\n";
  c << "  return 0;\n}\n";
  c.close();
  const std::string compile = std::string(MLPT_C_COMPILER) + " -std=c11 -I" + v.include.string() + " " +
                              (dir / "layout.c").string() + " -o " + (dir / "layout").string() + " 2>&1";
  REQUIRE(std::system(compile.c_str()) == 0);
  FILE* p = popen((dir / "layout").c_str(), "r");
  REQUIRE(p);
  std::vector<std::string> lines;
  for (const auto& name : h.struct_order)
    for (const auto& f : h.structs.at(name)) {
      size_t offset = 0, size = 0;
      REQUIRE(std::fscanf(p, "%zu %zu", &offset, &size) == 2);
      lines.push_back(v.name + " " + name + " " + f.name + " " + std::to_string(offset) + " " +
                      std::to_string(size) + " " + type_class(f.type, h));
    }
  pclose(p);
  fs::remove_all(dir);
  return lines;
}

struct Entry {
  size_t offset, size;
  std::string type;
  size_t order;
};

std::map<std::string, std::map<std::string, Entry>> by_struct(const std::vector<std::string>& lines) {
  std::map<std::string, std::map<std::string, Entry>> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string version, s, f, type;
    Entry e{};
    in >> version >> s >> f >> e.offset >> e.size;
    std::getline(in, type);
    e.type = type.substr(type.find_first_not_of(' '));
    e.order = i;
    out[s][f] = e;
  }
  return out;
}

}  // namespace

TEST_CASE(
    "every minor's struct layouts are the checked-in snapshot, and each minor only appends to the last") {
  std::vector<std::vector<std::string>> measured;
  for (const auto& v : versions()) measured.push_back(measure(v));

  const fs::path snapshot = kAbi / "snapshots" / "layouts.txt";
  if (const char* w = std::getenv("MLPT_WRITE_ABI_LAYOUTS"); w && std::string(w) == "1") {
    std::ofstream out(snapshot);
    out << "# The layout of every struct field of every ABI minor: version struct field offset size type\n"
           "# (written by tests/unit/abi with MLPT_WRITE_ABI_LAYOUTS=1; a change here is a change of the "
           "ABI)\n";
    for (const auto& lines : measured)
      for (const auto& l : lines) out << l << "\n";
  }
  std::vector<std::string> kept;
  std::ifstream in(snapshot);
  REQUIRE(in);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') kept.push_back(line);
  std::vector<std::string> all;
  for (const auto& lines : measured) all.insert(all.end(), lines.begin(), lines.end());
  for (size_t i = 0; i < std::max(all.size(), kept.size()); ++i) {
    INFO("line " << i << " of the snapshot");
    REQUIRE((i < kept.size() ? kept[i] : "(none)") == (i < all.size() ? all[i] : "(none)"));
  }

  // The rule itself: every field of a minor keeps its offset, size and type in the next, and what the
  // next adds comes after the fields it had.
  for (size_t v = 0; v + 1 < measured.size(); ++v) {
    const auto older = by_struct(measured[v]), newer = by_struct(measured[v + 1]);
    for (const auto& [name, fields] : older) {
      INFO(name << " from " << versions()[v].name << " to " << versions()[v + 1].name);
      REQUIRE(newer.count(name));
      size_t end = 0;
      for (const auto& [field, e] : fields) {
        INFO(field);
        REQUIRE(newer.at(name).count(field));
        const Entry& n = newer.at(name).at(field);
        CHECK(n.offset == e.offset);
        CHECK(n.size == e.size);
        CHECK(n.type == e.type);
        end = std::max(end, e.offset + e.size);
      }
      for (const auto& [field, n] : newer.at(name))
        if (!fields.count(field)) {
          INFO("appended " << field);
          CHECK(n.offset >= end);
        }
    }
  }
}
