// The GPU component tests' model (tests/support/device_model_fixtures.hpp: every kind of head
// grouping real, two GDN chunks, 8 experts; bf16-exact weights) and a temporary directory.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cuda_testing.hpp"
#include "device_model_fixtures.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace cuda_testing {

using mlpt::ref::ModelConfig;
using mlpt::ref::Weights;

using model_testing::bf16_exact_weights;
using model_testing::small_config;

// A directory of its own (per test binary and process), removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace cuda_testing
