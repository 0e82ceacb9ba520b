// The runtime's configuration (one JSON object, unknown keys are an error). Every key and default
// is listed in README.md.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlpt::sandbox {

struct RuntimeConfig {
  std::string runtime = "auto";        // "auto" | "apptainer" | "bwrap"
  std::string state_dir;               // per-sandbox writable layers and mount points
  std::string cache_dir;               // extracted images (image_mount "extract")
  std::string image_mount = "auto";    // "auto" | "squashfuse" | "extract"
  int64_t default_memory_limit_mb = 8192;
  int64_t default_max_processes = 1024;
  size_t default_output_limit = 1 << 20;  // 1 MiB
  int64_t file_timeout_ms = 60000;        // read_file / write_file
  bool require_limits = true;             // refuse to start when cgroups cannot enforce limits
  size_t keep_mounted = 8;                // images kept mounted after their last sandbox is gone
  std::vector<std::string> allowed_bind_prefixes;  // host paths an image may bind read-only
  std::vector<std::pair<std::string, std::string>> env;  // added to the fixed clean environment
  std::string bwrap = "bwrap", apptainer = "apptainer", squashfuse = "squashfuse",
              unsquashfs = "unsquashfs";
};

// Parses `json` (empty = {}); throws mlpt::sdk::Error(INVALID_ARGUMENT) naming the bad key.
RuntimeConfig parse_config(std::string_view json);

// The fixed environment every command starts with (before config `env` and the image's `env`).
std::vector<std::pair<std::string, std::string>> base_environment();

// Finds `name` on PATH (or checks it when it contains '/'); empty when absent.
std::string find_executable(const std::string& name);

}  // namespace mlpt::sandbox
