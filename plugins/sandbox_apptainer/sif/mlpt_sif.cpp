// mlpt-sif (`mlpt sif ...`): build a SIF image from a directory, or show what one holds.
//   mlpt sif build DIR OUT.sif [--comp gzip|xz|lz4|zstd] [--time EPOCH]
//   mlpt sif inspect FILE.sif [--json]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sif_image.hpp"

namespace {

using namespace mlpt::sif;

// On stdout with exit 0 when asked for (--help), else on stderr with exit 2 (a usage error).
int usage(bool asked = false) {
  (asked ? std::cout : std::cerr) << "usage: mlpt sif build DIR OUT.sif [--comp gzip|xz|lz4|zstd] [--time EPOCH]\n"
               "       mlpt sif inspect FILE.sif [--json]\n"
               "build: one primary system squashfs partition made by mksquashfs (all files owned by\n"
               "root, timestamps = --time, else SOURCE_DATE_EPOCH, else now). See the sandbox plugin's\n"
               "README for the layout a task image needs (/testbed, /.mlpt/binds.json).\n";
  return asked ? 0 : 2;
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

nlohmann::json to_json(const SifImage& img) {
  const Header& h = img.header;
  nlohmann::json j;
  j["file"] = img.path.string();
  j["file_size"] = img.file_size;
  j["header"] = {{"launch", h.launch},        {"magic", h.magic},
                 {"version", h.version},      {"arch", h.arch},
                 {"arch_name", arch_name(h.arch)}, {"id", uuid_string(h.id)},
                 {"ctime", h.ctime},          {"mtime", h.mtime},
                 {"dfree", h.dfree},          {"dtotal", h.dtotal},
                 {"descroff", h.descr_offset}, {"descrlen", h.descr_length},
                 {"dataoff", h.data_offset},  {"datalen", h.data_length}};
  j["descriptors"] = nlohmann::json::array();
  for (size_t i = 0; i < img.descriptors.size(); ++i) {
    const Descriptor& d = img.descriptors[i];
    nlohmann::json e = {{"id", d.id},
                        {"datatype", hex32(static_cast<uint32_t>(d.data_type))},
                        {"datatype_name", data_type_name(d.data_type)},
                        {"group", d.group_id & ~kGroupMask},
                        {"link", d.linked_id},
                        {"offset", d.offset},
                        {"size", d.size},
                        {"storelen", d.store_length},
                        {"ctime", d.ctime},
                        {"mtime", d.mtime},
                        {"name", d.name},
                        {"primary", i == img.primary}};
    if (d.data_type == static_cast<int32_t>(DataType::Partition)) {
      e["fstype"] = fs_type_name(d.fs_type());
      e["parttype"] = part_type_name(d.part_type());
      e["arch"] = arch_name(d.part_arch());
    }
    j["descriptors"].push_back(e);
  }
  j["squashfs_bytes_used"] = img.squashfs_bytes_used;
  return j;
}

void print_table(const SifImage& img) {
  const Header& h = img.header;
  std::printf("%-10s %s\n", "File:", img.path.c_str());
  std::printf("%-10s %s\n", "Launch:", h.launch.empty() ? "" : h.launch.substr(0, h.launch.find('\n')).c_str());
  std::printf("%-10s %s\n%-10s %s\n", "Magic:", h.magic.c_str(), "Version:", h.version.c_str());
  std::printf("%-10s %s (%s)\n%-10s %s\n", "Arch:", h.arch.c_str(), arch_name(h.arch).c_str(), "ID:",
              uuid_string(h.id).c_str());
  std::printf("%-10s %lld\n%-10s %lld\n", "Created:", static_cast<long long>(h.ctime), "Modified:",
              static_cast<long long>(h.mtime));
  std::printf("%-10s %lld of %lld free\n", "Descr:", static_cast<long long>(h.dfree), static_cast<long long>(h.dtotal));
  std::printf("%-10s offset %lld, length %lld\n", "Descr tbl:", static_cast<long long>(h.descr_offset),
              static_cast<long long>(h.descr_length));
  std::printf("%-10s offset %lld, length %lld\n\n", "Data:", static_cast<long long>(h.data_offset),
              static_cast<long long>(h.data_length));
  std::printf("%-4s %-8s %-12s %-6s %-5s %-12s %-12s %-10s %-9s %-6s %s\n", "ID", "TYPE", "NAME", "GROUP", "LINK",
              "OFFSET", "SIZE", "FSTYPE", "PARTTYPE", "ARCH", "");
  for (size_t i = 0; i < img.descriptors.size(); ++i) {
    const Descriptor& d = img.descriptors[i];
    bool part = d.data_type == static_cast<int32_t>(DataType::Partition);
    std::printf("%-4u %-8s %-12s %-6u %-5u %-12lld %-12lld %-10s %-9s %-6s %s\n", d.id,
                hex32(static_cast<uint32_t>(d.data_type)).c_str(), d.name.substr(0, 12).c_str(),
                d.group_id & ~kGroupMask, d.linked_id, static_cast<long long>(d.offset),
                static_cast<long long>(d.size), part ? fs_type_name(d.fs_type()).c_str() : "-",
                part ? part_type_name(d.part_type()).c_str() : "-", part ? arch_name(d.part_arch()).c_str() : "-",
                i == img.primary ? "(primary)" : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (std::any_of(a.begin(), a.end(), [](const std::string& w) { return w == "-h" || w == "--help"; })) return usage(true);
  if (a.empty()) return usage();
  try {
    if (a[0] == "build") {
      BuildOptions o;
      std::vector<std::string> pos;
      for (size_t i = 1; i < a.size(); ++i) {
        if (a[i] == "--comp" && i + 1 < a.size()) o.compression = a[++i];
        else if (a[i] == "--time" && i + 1 < a.size()) o.time = std::stoll(a[++i]);
        else if (a[i].rfind("--", 0) == 0) return usage();
        else pos.push_back(a[i]);
      }
      if (pos.size() != 2) return usage();
      SifImage img = build_sif(pos[0], pos[1], o);
      std::printf("%s: %llu bytes, squashfs partition at offset %lld (%lld bytes), id %s\n", img.path.c_str(),
                  static_cast<unsigned long long>(img.file_size), static_cast<long long>(img.primary_partition().offset),
                  static_cast<long long>(img.primary_partition().size), uuid_string(img.header.id).c_str());
      return 0;
    }
    if (a[0] == "inspect") {
      bool json = false;
      std::vector<std::string> pos;
      for (size_t i = 1; i < a.size(); ++i) {
        if (a[i] == "--json") json = true;
        else if (a[i].rfind("--", 0) == 0) return usage();
        else pos.push_back(a[i]);
      }
      if (pos.size() != 1) return usage();
      SifImage img = read_sif(pos[0]);
      if (json) std::cout << to_json(img).dump(2) << "\n";
      else print_table(img);
      return 0;
    }
    return usage();
  } catch (const SifError& e) {
    std::cerr << "mlpt sif: error (" << error_kind_name(e.kind()) << "): " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mlpt sif: error: " << e.what() << "\n";
    return 1;
  }
}
