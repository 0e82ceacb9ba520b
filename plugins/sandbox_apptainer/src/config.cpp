#include "config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/error.hpp"

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
  nlohmann::json j;
  try {
    j = text.find_first_not_of(" \t\r\n") == std::string_view::npos ? nlohmann::json::object()
                                                                      : nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, std::string("sandbox config is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config must be a JSON object");
  auto str = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_string()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key '" + key + "' must be a string");
    return v.get<std::string>();
  };
  auto num = [&](const std::string& key, const nlohmann::json& v, int64_t min) {
    if (!v.is_number_integer() || v.get<int64_t>() < min)
      throw Error(MLPT_INVALID_ARGUMENT,
                  "sandbox config key '" + key + "' must be an integer >= " + std::to_string(min));
    return v.get<int64_t>();
  };
  for (auto& [key, v] : j.items()) {
    if (key == "runtime") {
      c.runtime = str(key, v);
      if (c.runtime != "auto" && c.runtime != "apptainer" && c.runtime != "bwrap")
        throw Error(MLPT_INVALID_ARGUMENT,
                    "sandbox config key 'runtime' is \"" + c.runtime + "\"; expected auto, apptainer or bwrap");
    } else if (key == "state_dir") c.state_dir = str(key, v);
    else if (key == "cache_dir") c.cache_dir = str(key, v);
    else if (key == "image_mount") {
      c.image_mount = str(key, v);
      if (c.image_mount != "auto" && c.image_mount != "squashfuse" && c.image_mount != "extract")
        throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key 'image_mount' is \"" + c.image_mount +
                                               "\"; expected auto, squashfuse or extract");
    } else if (key == "default_memory_limit_mb") c.default_memory_limit_mb = num(key, v, 16);
    else if (key == "max_sandboxes") c.max_sandboxes = num(key, v, 1);
    else if (key == "writable_layer_mb") c.writable_layer_mb = num(key, v, 16);
    else if (key == "default_max_processes") c.default_max_processes = num(key, v, 4);
    else if (key == "default_output_limit") c.default_output_limit = static_cast<size_t>(num(key, v, 1));
    else if (key == "file_timeout_ms") c.file_timeout_ms = num(key, v, 1);
    else if (key == "max_read_file_bytes") c.max_read_file_bytes = static_cast<size_t>(num(key, v, 1));
    else if (key == "keep_mounted") c.keep_mounted = static_cast<size_t>(num(key, v, 0));
    else if (key == "sandbox_uid") c.sandbox_uid = num(key, v, 1);
    else if (key == "sandbox_gid") c.sandbox_gid = num(key, v, 1);
    else if (key == "seccomp") {
      if (!v.is_boolean()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key 'seccomp' must be a boolean");
      c.seccomp = v.get<bool>();
    } else if (key == "require_limits") {
      if (!v.is_boolean()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key 'require_limits' must be a boolean");
      c.require_limits = v.get<bool>();
    } else if (key == "allowed_bind_prefixes") {
      if (!v.is_array()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key '" + key + "' must be an array");
      c.allowed_bind_prefixes.clear();
      for (auto& e : v) c.allowed_bind_prefixes.push_back(str(key, e));
    } else if (key == "env") {
      if (!v.is_object()) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config key 'env' must be an object");
      for (auto& [k, e] : v.items()) c.env.emplace_back(k, str("env." + k, e));
    } else if (key == "bwrap") c.bwrap = str(key, v);
    else if (key == "apptainer") c.apptainer = str(key, v);
    else if (key == "squashfuse") c.squashfuse = str(key, v);
    else if (key == "unsquashfs") c.unsquashfs = str(key, v);
    else
      throw Error(MLPT_INVALID_ARGUMENT, "unknown sandbox config key '" + key + "' (see plugins/sandbox_apptainer/README.md)");
  }
  for (int64_t id : {c.sandbox_uid, c.sandbox_gid})
    if (id > 0xFFFFFFFELL) throw Error(MLPT_INVALID_ARGUMENT, "sandbox config: sandbox_uid and sandbox_gid must be below 2^32 - 1");
  for (auto* d : {&c.state_dir, &c.cache_dir})
    if (d->empty() || (*d)[0] != '/') throw Error(MLPT_INVALID_ARGUMENT, "sandbox config: state_dir and cache_dir must be absolute paths");
  return c;
}

}  // namespace mlpt::sandbox
