// Per-sandbox limits through cgroups: the pids controller (max_processes, counted over every task
// of the sandbox, threads included) and the memory controller (memory_limit_mb). Both v1 (separate
// pids/ and memory/ hierarchies) and v2 (one unified directory) layouts are handled. A cgroup is
// also how the runtime finds and kills every process of a sandbox, whatever namespace it is in.
// RLIMIT_NPROC is no substitute: it counts per user across the host, and cgroups also count threads.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mlpt::sandbox {

// Where this process may create cgroups: one directory per controller (the same one twice on v2).
struct CgroupParents {
  std::string pids, memory;
  bool unified = false;
  // Detects from /proc/self/cgroup; nullopt (with `why`) when neither controller is writable.
  static std::optional<CgroupParents> detect(std::string& why);
};

class Cgroup {
 public:
  // Creates <parent>/<name> in both controllers with the limits; throws sdk::Error on failure.
  Cgroup(const CgroupParents& parents, const std::string& name, long long memory_bytes, long long max_pids);
  ~Cgroup();  // kills what is left, removes the directories
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // The cgroup.procs files a new process writes its pid into.
  const std::vector<std::string>& procs_files() const { return procs_; }
  // SIGKILLs every member until none is left (bounded wait); returns the number still alive.
  size_t kill_all() const;
  std::vector<int> members() const;

 private:
  std::vector<std::string> dirs_, procs_;
};

// Kills members of and removes `dir` and every cgroup below it (stale sandboxes of a dead host).
void remove_cgroup_tree(const std::string& dir);

}  // namespace mlpt::sandbox
