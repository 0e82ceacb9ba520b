#include "core/run/run_dir.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/run/dataset.hpp"

namespace mlpt::run {
namespace {

std::string config_sha256(const std::filesystem::path& file) {
  auto hash = file_sha256(file);
  if (!hash) throw Error(MLPT_NOT_FOUND, file.string() + ": cannot read the run's config");
  return *hash;
}

}  // namespace

void write_run_marker(const std::filesystem::path& output_dir, const std::filesystem::path& config_file) {
  const auto config = std::filesystem::absolute(config_file).lexically_normal();
  nlohmann::json marker = {{"config", config.string()}, {"config_sha256", config_sha256(config)}};
  const auto path = output_dir / "run.json", tmp = output_dir / "run.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << marker.dump(2) << "\n";
    if (!out) throw Error(MLPT_INTERNAL, tmp.string() + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

std::filesystem::path config_of_run(const std::filesystem::path& output_dir) {
  const auto path = output_dir / "run.json";
  std::ifstream in(path);
  if (!in) throw Error(MLPT_NOT_FOUND, path.string() + ": not a run folder (no run.json); pass the output_dir of a run");
  nlohmann::json marker = nlohmann::json::parse(in, nullptr, false);
  if (!marker.is_object() || !marker.contains("config") || !marker["config"].is_string() || !marker.contains("config_sha256"))
    throw Error(MLPT_INVALID_ARGUMENT, path.string() + ": malformed (wants {\"config\", \"config_sha256\"})");
  const std::filesystem::path config = marker["config"].get<std::string>();
  if (!std::filesystem::exists(config)) throw Error(MLPT_NOT_FOUND, path.string() + ": the run's config " + config.string() + " is gone");
  if (config_sha256(config) != marker["config_sha256"].get<std::string>())
    throw Error(MLPT_FAILED_PRECONDITION, config.string() + " changed since the run in " + output_dir.string() +
                                              " started; a resumed run must use the config it started with");
  return config;
}

}  // namespace mlpt::run
