// A run's output folder remembers the config that started it (run.json: its absolute path and the
// SHA-256 of its bytes), so `mlpt run --resume DIR` finds it again and refuses a config that has
// changed since: a resumed run must be the same run.
#pragma once

#include <filesystem>

namespace mlpt::run {

void write_run_marker(const std::filesystem::path& output_dir, const std::filesystem::path& config_file);

// The config file of the run in `output_dir`; throws mlpt::Error (naming the folder) if run.json is
// missing or malformed, the config is gone, or its bytes differ from when the run started.
std::filesystem::path config_of_run(const std::filesystem::path& output_dir);

}  // namespace mlpt::run
