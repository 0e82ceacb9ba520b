// Every file under a folder with its size and modification time, to show that a refused or failed
// run left the folder as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

inline std::map<std::string, std::pair<std::uintmax_t, std::filesystem::file_time_type>> folder_snapshot(const std::filesystem::path& dir) {
  std::map<std::string, std::pair<std::uintmax_t, std::filesystem::file_time_type>> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().string()] = {e.file_size(), e.last_write_time()};
  return files;
}
