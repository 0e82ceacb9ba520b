// A run's output folder. It remembers the config that started it (run.json: its absolute path, the
// SHA-256 of its bytes and its keys), so `mlpt run --resume DIR` finds it again and refuses a
// config whose results-defining keys changed since (resume_config.hpp): a resumed run must be the
// same run, though it may run on another placement. A folder that holds a run is never written by
// another one: a new run refuses it (or takes the next free sibling when asked).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/run/checkpoint.hpp"
#include "core/run/resume_config.hpp"

namespace mlpt::run {

// Where a run starts from: the checkpoint a resumed run continues from (none for a new run) and
// the milliseconds its earlier attempts ran.
struct RunStart {
  std::optional<CheckpointState> resume_from;
  int64_t spent_before_ms = 0;
};
// Checks `output_dir` before anything is written (a new run refuses a folder that holds another
// run, never touching it; a resume needs a checkpoint there), then creates it.
RunStart open_run_folder(const std::filesystem::path& output_dir, bool resume);

void write_run_marker(const std::filesystem::path& output_dir, const std::filesystem::path& config_file);

// The config file of the run in `output_dir`; throws mlpt::Error (naming the folder) if run.json is
// missing or malformed or the config is gone.
std::filesystem::path config_of_run(const std::filesystem::path& output_dir);

// Checks `config_file` against the config the run in `output_dir` started with, for `mlpt run
// --resume DIR|CONFIG.toml`: throws mlpt::Error naming each key that defines the run's results and
// changed (every change, when run.json predates recording the keys); returns the changes that only
// place the work, for the run to say (empty when there are none).
std::vector<ConfigChange> check_resumed_config(const std::filesystem::path& output_dir, const std::filesystem::path& config_file);

// What in `output_dir` shows that a run wrote there (e.g. "run.json, result.txt"); nullopt when
// the folder is absent or holds nothing a run writes.
std::optional<std::string> run_traces(const std::filesystem::path& output_dir);

// `output_dir` itself when it holds no run, else the first of `output_dir`-2, -3, ... that holds none.
std::filesystem::path free_output_dir(const std::filesystem::path& output_dir);

// The result log a resumed run writes: result_resumed.txt, then result_resumed_2.txt, ... (never
// one an earlier attempt wrote).
std::filesystem::path resumed_result_log(const std::filesystem::path& output_dir);

// Milliseconds the earlier attempts of the run in `output_dir` ran: for each result log there
// (result.txt, result_resumed*.txt), run_start to its last line.
int64_t time_spent_before(const std::filesystem::path& output_dir);

// Renames `file` (if it exists) to <stem>_attempt_<N><ext>, the first N free, so a resumed run
// that rewrites it loses nothing.
void keep_aside(const std::filesystem::path& file);

}  // namespace mlpt::run
