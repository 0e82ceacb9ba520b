// The runtime's state directory: one folder per runtime instance, named after its owner
//   <state_dir>/p<pid>-<process start time>-r<n>/{images/, sandboxes/}
// and cgroups named mlpt-sandbox-<same tag>. A host killed by SIGKILL cannot clean up, so every new
// runtime first sweeps what belongs to owners that are gone: unmounts, folders and cgroups.
#pragma once

#include <optional>
#include <string>

#include "cgroup.hpp"

namespace mlpt::sandbox {

// A fresh owner tag for a runtime of this process.
std::string new_owner_tag();
// True when the process that created `tag` still runs.
bool owner_alive(const std::string& tag);

// Unmounts (lazily, deepest first) every mount at or below `dir` in this mount namespace.
void unmount_below(const std::string& dir);

// Removes state of dead owners under `state_dir` and their cgroups below `cgroups`; returns how
// many owners were swept.
int sweep_stale(const std::string& state_dir, const std::optional<CgroupParents>& cgroups);

// rm -rf that does not cross into mounts.
void remove_tree(const std::string& dir);

}  // namespace mlpt::sandbox
