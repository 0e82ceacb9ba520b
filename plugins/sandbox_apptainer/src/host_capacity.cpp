#include "host_capacity.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sandbox {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024;
constexpr int64_t kMaxDefaultMemoryMb = 8192;

uint64_t read_limit(const std::string& file) {
  std::ifstream f(file);
  std::string v;
  if (!(f >> v) || v == "max") return UINT64_MAX;
  try {
    return std::stoull(v);
  } catch (...) {
    return UINT64_MAX;
  }
}

}  // namespace

uint64_t host_memory_bytes(const std::optional<CgroupParents>& cgroups) {
  uint64_t total = UINT64_MAX;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    uint64_t kb = 0;
    meminfo >> kb;
    if (key == "MemTotal:") {
      total = kb * 1024;
      break;
    }
    std::string rest;
    std::getline(meminfo, rest);
  }
  if (cgroups) {
    // The parent's own limit binds every sandbox cgroup below it (v1 reports "no limit" as a huge number).
    total = std::min(total, read_limit(cgroups->memory + (cgroups->unified ? "/memory.max" : "/memory.limit_in_bytes")));
  }
  return total;
}

uint64_t sandbox_budget_bytes(uint64_t host_bytes) {
  const uint64_t reserve = std::max<uint64_t>(1024 * kMiB, host_bytes / 8);
  return host_bytes > reserve ? host_bytes - reserve : 0;
}

SandboxSizing size_sandboxes(const RuntimeConfig& c, uint64_t budget_bytes) {
  SandboxSizing s;
  const int64_t budget_mb = static_cast<int64_t>(budget_bytes / kMiB);
  const int64_t n = std::max<int64_t>(1, c.max_sandboxes);
  s.memory_limit_mb = c.default_memory_limit_mb > 0 ? c.default_memory_limit_mb
                                                    : std::min<int64_t>(kMaxDefaultMemoryMb, budget_mb / n);
  s.writable_layer_mb = c.writable_layer_mb > 0 ? c.writable_layer_mb : s.memory_limit_mb;
  if (s.memory_limit_mb < 16 || n * s.memory_limit_mb > budget_mb) {
    std::ostringstream o;
    o << "sandbox config cannot fit this host: max_sandboxes = " << n << " x " << s.memory_limit_mb
      << " MiB of memory each = " << n * s.memory_limit_mb << " MiB, but sandboxes may use " << budget_mb
      << " MiB (host memory less a reserve for the host); lower max_sandboxes or default_memory_limit_mb";
    throw sdk::Error(MLPT_FAILED_PRECONDITION, o.str());
  }
  return s;
}

int64_t open_files_per_process(long long memory_bytes, long long max_processes, int64_t configured) {
  if (configured > 0) return configured;
  const long long fit = memory_bytes / (std::max<long long>(1, max_processes) * kKernelBytesPerOpenFile);
  return std::clamp<long long>(fit, 64, 1024);
}

}  // namespace mlpt::sandbox
