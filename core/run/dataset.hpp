// A JSONL dataset in the fixed order of its file (the order is part of the benchmark): one JSON
// object per line. A malformed row is an error naming file and line. Rows stay generic JSON; the
// image of a row follows the R2E-Gym rule when the row has one (<repo>_final_<commit>.sif).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::run {

struct Dataset {
  std::filesystem::path file;
  std::vector<nlohmann::json> rows;
  std::string sha256;  // of the file's bytes: the dataset's identity in logs and checks

  static Dataset load(const std::filesystem::path& file);
  // The sandbox image of row `i` under `images`, or "" when the row names none.
  std::string image(size_t i, const std::filesystem::path& images) const;
};

std::string sha256_hex(const std::string& bytes);
// SHA-256 of a file's bytes, or nothing when it cannot be read.
std::optional<std::string> file_sha256(const std::filesystem::path& file);

}  // namespace mlpt::run
