// Where a benchmark finds the prepared data (models from scripts/prepare-tiny.sh, task images, npm
// fixtures): $MLPT_CACHE_DIR when set, as the scripts use it, else the folder configured at build
// time (the configure-time $MLPT_CACHE_DIR, or .cache in the source tree).
#pragma once

#include <cstdlib>
#include <filesystem>

namespace mlpt::bench {

inline std::filesystem::path cache_dir() {
  const char* env = std::getenv("MLPT_CACHE_DIR");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path(MLPT_BENCH_CACHE_DIR);
}

}  // namespace mlpt::bench
