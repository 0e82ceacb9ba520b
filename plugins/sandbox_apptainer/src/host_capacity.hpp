// How much memory sandboxes may take on this host, and the per-sandbox limits that follow from it
// and from the run's concurrency. Writable layers live in memory (tmpfs), so they are sized from
// the same budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cgroup.hpp"
#include "config.hpp"

namespace mlpt::sandbox {

// The memory this process may use: MemTotal, lowered by the memory limit of the cgroup the
// sandboxes' cgroups are created under (when there is one).
uint64_t host_memory_bytes(const std::optional<CgroupParents>& cgroups);

// What is left for sandboxes: the host's memory less a reserve for the host's own processes
// (1/8 of it, at least 1 GiB).
uint64_t sandbox_budget_bytes(uint64_t host_bytes);

struct SandboxSizing {
  int64_t memory_limit_mb = 0;   // default per sandbox
  int64_t writable_layer_mb = 0;  // size of each sandbox's writable layer (tmpfs)
};

// Resolves the "auto" (0) defaults of `config` for `budget_bytes` and `config.max_sandboxes`
// (auto memory: the budget shared by max_sandboxes, at most 8 GiB; auto layer: the memory limit),
// and refuses a configuration that cannot fit: max_sandboxes x (memory limit) above the budget
// throws sdk::Error(FAILED_PRECONDITION) with the numbers.
SandboxSizing size_sandboxes(const RuntimeConfig& config, uint64_t budget_bytes);

// Open files are kernel memory (a struct file, and for a new file or pipe its inode and dentry)
// that a memory cgroup may not be charged for, and RLIMIT_NOFILE is per process: a sandbox can
// hold up to (processes x files per process) of them. This is the most one open file was measured
// to cost, rounded up: about 1.3 KiB of slab for a pipe's end or a new file on tmpfs, about 2.4 KiB
// for a new file on a sandbox's overlay (an overlay inode and dentry over the upper layer's).
constexpr int64_t kKernelBytesPerOpenFile = 4096;
// The per-process file limit of a sandbox: `configured` when > 0; else as many as keep
// processes x files x kKernelBytesPerOpenFile within the sandbox's memory limit, between 64
// (what a test run needs at least) and 1024 (the usual default).
int64_t open_files_per_process(long long memory_bytes, long long max_processes, int64_t configured);

}  // namespace mlpt::sandbox
