#include "config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::sandbox {
namespace {

using sdk::Error;

const std::vector<std::string>& default_bind_prefixes() {
  static const std::vector<std::string> p = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                             "/etc/alternatives", "/etc/ssl/certs", "/etc/ld.so.cache",
                                             "/etc/localtime", "/opt"};
  return p;
}

std::string default_state_dir() {
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm/mlpt-sandbox";
  return "/tmp/mlpt-sandbox";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> base_environment() {
  return {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
          {"HOME", "/root"},
          {"LANG", "C.UTF-8"},
          {"TERM", "dumb"}};
}

std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return "";
}

RuntimeConfig parse_config(std::string_view text) {
  RuntimeConfig c;
  c.state_dir = default_state_dir();
  c.cache_dir = "/var/tmp/mlpt-sandbox-cache";
  c.allowed_bind_prefixes = default_bind_prefixes();
  sdk::Settings s(text, "sandbox apptainer");
  c.runtime = s.choice_or("runtime", c.runtime, {"auto", "apptainer", "bwrap"});
  c.state_dir = s.string_or("state_dir", c.state_dir);
  c.cache_dir = s.string_or("cache_dir", c.cache_dir);
  c.image_mount = s.choice_or("image_mount", c.image_mount, {"auto", "squashfuse", "extract"});
  c.default_memory_limit_mb = s.integer_or("default_memory_limit_mb", c.default_memory_limit_mb, 16);
  c.max_sandboxes = s.integer_or("max_sandboxes", c.max_sandboxes, 1);
  c.writable_layer_mb = s.integer_or("writable_layer_mb", c.writable_layer_mb, 16);
  c.default_max_processes = s.integer_or("default_max_processes", c.default_max_processes, 4);
  c.max_open_files = s.integer_or("max_open_files", c.max_open_files, 0, 1 << 20);
  if (c.max_open_files > 0 && c.max_open_files < 16)
    throw Error(MLPT_INVALID_ARGUMENT, "sandbox config: max_open_files must be 0 (auto) or at least 16, got " +
                                                std::to_string(c.max_open_files));
  c.default_output_limit = static_cast<size_t>(s.integer_or("default_output_limit", static_cast<int64_t>(c.default_output_limit), 1));
  c.file_timeout_ms = s.integer_or("file_timeout_ms", c.file_timeout_ms, 1);
  c.max_read_file_bytes = static_cast<size_t>(s.integer_or("max_read_file_bytes", static_cast<int64_t>(c.max_read_file_bytes), 1));
  c.keep_mounted = static_cast<size_t>(s.integer_or("keep_mounted", static_cast<int64_t>(c.keep_mounted), 0));
  // 2^32 - 1 is the kernel's "no id"; a sandbox never runs as root.
  c.sandbox_uid = s.integer_or("sandbox_uid", c.sandbox_uid, 1, 0xFFFFFFFELL);
  c.sandbox_gid = s.integer_or("sandbox_gid", c.sandbox_gid, 1, 0xFFFFFFFELL);
  c.seccomp = s.boolean_or("seccomp", c.seccomp);
  c.require_limits = s.boolean_or("require_limits", c.require_limits);
  c.allowed_bind_prefixes = s.strings_or("allowed_bind_prefixes", c.allowed_bind_prefixes);
  sdk::Settings env = s.object("env");
  for (auto& [k, e] : env.json().items()) c.env.emplace_back(k, env.string(k));
  env.reject_unknown();
  c.bwrap = s.string_or("bwrap", c.bwrap);
  c.apptainer = s.string_or("apptainer", c.apptainer);
  c.squashfuse = s.string_or("squashfuse", c.squashfuse);
  c.unsquashfs = s.string_or("unsquashfs", c.unsquashfs);
  s.reject_unknown();
  for (auto* d : {&c.state_dir, &c.cache_dir})
    if (d->empty() || (*d)[0] != '/') throw Error(MLPT_INVALID_ARGUMENT, "sandbox config: state_dir and cache_dir must be absolute paths");
  return c;
}

}  // namespace mlpt::sandbox
