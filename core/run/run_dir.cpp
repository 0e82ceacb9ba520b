#include "core/run/run_dir.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/config/toml_table.hpp"
#include "core/error.hpp"
#include "core/mllog/keys.hpp"
#include "core/mllog/reader.hpp"
#include "core/run/dataset.hpp"

namespace mlpt::run {
namespace {

std::string config_sha256(const std::filesystem::path& file) {
  auto hash = file_sha256(file);
  if (!hash) throw Error(MLPT_NOT_FOUND, file.string() + ": cannot read the run's config");
  return *hash;
}

// The config's keys and values as written (before ${VAR} expansion, like the bytes hashed).
nlohmann::json config_keys(const std::filesystem::path& file) { return config::to_json(config::TomlTable::parse_file(file)); }

}  // namespace

RunStart open_run_folder(const std::filesystem::path& out, bool resume) {
  RunStart start;
  if (resume) {
    start.resume_from = latest_checkpoint(out / "checkpoints");
    if (!start.resume_from) throw Error(MLPT_NOT_FOUND, (out / "checkpoints").string() + ": no checkpoint to resume from");
    start.spent_before_ms = time_spent_before(out);
  } else if (auto traces = run_traces(out)) {
    throw Error(MLPT_ALREADY_EXISTS, out.string() + " holds another run (" + *traces +
                                         "); a run never writes into it. Continue that run with `mlpt run --resume " +
                                         out.string() + "`, pass --new-folder to write to the next free " +
                                         out.filename().string() + "-N, or set [run] output_dir");
  }
  std::filesystem::create_directories(out);
  return start;
}

void write_run_marker(const std::filesystem::path& output_dir, const std::filesystem::path& config_file) {
  const auto config = std::filesystem::absolute(config_file).lexically_normal();
  nlohmann::json marker = {{"config", config.string()}, {"config_sha256", config_sha256(config)}, {"config_keys", config_keys(config)}};
  const auto path = output_dir / "run.json", tmp = output_dir / "run.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << marker.dump(2) << "\n";
    if (!out) throw Error(MLPT_INTERNAL, tmp.string() + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

namespace {

nlohmann::json read_marker(const std::filesystem::path& output_dir) {
  const auto path = output_dir / "run.json";
  std::ifstream in(path);
  if (!in) throw Error(MLPT_NOT_FOUND, path.string() + ": not a run folder (no run.json); pass the output_dir of a run");
  nlohmann::json marker = nlohmann::json::parse(in, nullptr, false);
  if (!marker.is_object() || !marker.contains("config") || !marker["config"].is_string() || !marker.contains("config_sha256"))
    throw Error(MLPT_INVALID_ARGUMENT, path.string() + ": malformed (wants {\"config\", \"config_sha256\"})");
  return marker;
}

}  // namespace

std::filesystem::path config_of_run(const std::filesystem::path& output_dir) {
  const auto marker = read_marker(output_dir);
  const std::filesystem::path config = marker["config"].get<std::string>();
  if (!std::filesystem::exists(config))
    throw Error(MLPT_NOT_FOUND, (output_dir / "run.json").string() + ": the run's config " + config.string() + " is gone");
  return config;
}

std::vector<ConfigChange> check_resumed_config(const std::filesystem::path& output_dir, const std::filesystem::path& config_file) {
  const auto marker = read_marker(output_dir);
  if (config_sha256(config_file) == marker["config_sha256"].get<std::string>()) return {};
  const std::filesystem::path started = marker["config"].get<std::string>();
  const bool same_file = std::filesystem::absolute(config_file).lexically_normal() == started;
  const std::string what = same_file ? config_file.string() + " changed since the run in " + output_dir.string() + " started"
                                     : config_file.string() + " is not the config the run in " + output_dir.string() +
                                           " started with (" + started.string() + ")";
  if (!marker.contains("config_keys"))
    throw Error(MLPT_FAILED_PRECONDITION, what + "; a resumed run must use the config it started with (this run's run.json "
                                                 "predates recording the config's keys, so no change can be told apart)");
  std::vector<ConfigChange> changes = config_changes(marker["config_keys"], config_keys(config_file));
  std::string refused;
  for (const auto& c : changes)
    if (!c.places_work) refused += (refused.empty() ? "" : "; ") + c.key + " was " + c.before + ", now " + c.after;
  if (!refused.empty())
    throw Error(MLPT_FAILED_PRECONDITION, what + ": " + refused +
                                              ". A resumed run keeps every key that defines its results (model, data, benchmark, "
                                              "optimizer and loss settings, seeds); only keys that place the work may change "
                                              "(layout, ranks, threads, devices: docs/distributed.md)");
  return changes;
}

std::optional<std::string> run_traces(const std::filesystem::path& output_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(output_dir, ec)) return std::nullopt;
  std::string found;
  for (const char* name : {"run.json", "result.txt", "result_resumed.txt", "metrics.jsonl", "report.html", "checkpoints", "rollouts.jsonl.gz"})
    if (std::filesystem::exists(output_dir / name, ec)) found += (found.empty() ? "" : ", ") + std::string(name);
  if (found.empty()) return std::nullopt;
  return found;
}

std::filesystem::path free_output_dir(const std::filesystem::path& output_dir) {
  auto dir = output_dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  for (int n = 1;; ++n) {
    auto candidate = n == 1 ? dir : std::filesystem::path(dir.string() + "-" + std::to_string(n));
    if (!run_traces(candidate)) return candidate;
  }
}

std::filesystem::path resumed_result_log(const std::filesystem::path& output_dir) {
  for (int n = 1;; ++n) {
    auto log = output_dir / (n == 1 ? std::string("result_resumed.txt") : "result_resumed_" + std::to_string(n) + ".txt");
    if (!std::filesystem::exists(log)) return log;
  }
}

int64_t time_spent_before(const std::filesystem::path& output_dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(output_dir, ec)) {
    const auto name = e.path().filename().string();
    if (name != "result.txt" && name.rfind("result_resumed", 0) != 0) continue;
    const auto log = mllog::parse_log_file(e.path());
    const mllog::Record* start = nullptr;
    for (const auto& r : log.records)
      if (r.key == mllog::keys::kRunStart) start = &r;
    if (start && !log.records.empty()) total += std::max<int64_t>(0, log.records.back().time_ms - start->time_ms);
  }
  return total;
}

void keep_aside(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) return;
  for (int n = 1;; ++n) {
    auto aside = file.parent_path() / (file.stem().string() + "_attempt_" + std::to_string(n) + file.extension().string());
    if (!std::filesystem::exists(aside)) return std::filesystem::rename(file, aside);
  }
}

}  // namespace mlpt::run
