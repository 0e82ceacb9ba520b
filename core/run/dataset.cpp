#include "core/run/dataset.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "sdk/include/mlpt/sdk/sha256.hpp"

namespace mlpt::run {

Dataset Dataset::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(MLPT_NOT_FOUND, file.string() + ": dataset file cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  Dataset d;
  d.file = file;
  const std::string bytes = buffer.str();
  d.sha256 = sha256_hex(bytes);
  std::istringstream lines(bytes);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(MLPT_INVALID_ARGUMENT, file.string() + ":" + std::to_string(n) + ": not valid JSON at byte " +
                                             std::to_string(e.byte) + " of the line: " + e.what());
    }
    if (!row.is_object()) throw Error(MLPT_INVALID_ARGUMENT, file.string() + ":" + std::to_string(n) + ": a row must be a JSON object");
    d.rows.push_back(std::move(row));
  }
  if (d.rows.empty()) throw Error(MLPT_INVALID_ARGUMENT, file.string() + ": dataset has no rows");
  return d;
}

std::string Dataset::image(size_t i, const std::filesystem::path& images) const {
  const auto& row = rows.at(i);
  if (!row.contains("repo_name") || !row.contains("commit_hash")) return "";
  if (!row["repo_name"].is_string() || !row["commit_hash"].is_string())
    throw Error(MLPT_INVALID_ARGUMENT, file.string() + ": row " + std::to_string(i + 1) + ": repo_name and commit_hash must be strings");
  return (images / (row["repo_name"].get<std::string>() + "_final_" + row["commit_hash"].get<std::string>() + ".sif")).string();
}

std::optional<std::string> file_sha256(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return sha256_hex(bytes.str());
}

std::string sha256_hex(const std::string& bytes) { return sdk::sha256_hex(bytes); }

}  // namespace mlpt::run
