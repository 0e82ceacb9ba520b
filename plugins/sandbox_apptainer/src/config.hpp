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
  // 0 = auto: the host's sandbox budget shared by max_sandboxes, at most 8 GiB (host_capacity.hpp).
  int64_t default_memory_limit_mb = 0;
  int64_t max_sandboxes = 16;             // how many exist at once in the run (its concurrency)
  int64_t writable_layer_mb = 0;          // each sandbox's writable tmpfs; 0 = its memory limit
  int64_t default_max_processes = 1024;
  // Open files per process (RLIMIT_NOFILE); 0 = auto from the memory and process limits (host_capacity.hpp).
  int64_t max_open_files = 0;
  size_t default_output_limit = 1 << 20;  // 1 MiB
  int64_t file_timeout_ms = 60000;        // read_file / write_file
  size_t max_read_file_bytes = 64u << 20; // read_file refuses larger files (RESOURCE_EXHAUSTED)
  bool require_limits = true;             // refuse to start when cgroups cannot enforce limits
  // The host uid/gid every sandbox process runs as (root inside its user namespace, this outside).
  // The image's files appear owned by it; 0 (the host's root) is refused.
  int64_t sandbox_uid = 65534, sandbox_gid = 65534;
  bool seccomp = true;                    // deny the calls in seccomp_filter.hpp
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
