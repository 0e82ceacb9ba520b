// Running one sandbox command from the host: fork, set the child up (own process group, death
// signal, cgroup membership, optionally a private mount namespace with the sandbox's overlay
// mounted), exec, then pump stdin/stdout with a deadline and an output cap.
//
// Safe in a multithreaded host: between fork and exec the child makes only async-signal-safe
// system calls on memory prepared by the parent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::sandbox {

struct ChildSetup {
  std::string exe;                 // absolute path
  std::vector<std::string> argv;   // argv[0] included
  std::vector<std::string> env;    // "K=V"
  std::vector<std::string> cgroup_procs;  // cgroup.procs files the child joins before exec
  // When set: unshare(CLONE_NEWNS), make every mount private, then mount overlayfs on
  // `overlay_target` with `overlay_options`. The mount dies with the namespace, i.e. with the
  // last process of the command, so no mount outlives a command whatever happens to the host.
  std::string overlay_target, overlay_options;
  // Start the child as pid 1 of a new pid namespace. Its death signal (the host died) then kills
  // every process below it, whatever they do; bwrap's own --die-with-parent is not enough (its
  // inner init was seen to outlive a SIGKILLed outer bwrap).
  bool own_pid_namespace = false;
  // When >= 0: after the overlay is mounted, drop every host privilege (no supplementary groups,
  // this gid and uid) before exec, so nothing the command does runs as the host's root.
  long run_as_uid = -1, run_as_gid = -1;
  // When not empty: bytes the child reads from descriptor 4 (a pipe filled and closed by the
  // parent), e.g. a seccomp program for `bwrap --seccomp 4`. At most a pipe buffer (64 KiB).
  std::string fd4_data;
  // When > 0: RLIMIT_NOFILE (soft and hard) of the child, so nothing it starts can hold more open
  // files than this per process (raising a hard limit needs CAP_SYS_RESOURCE on the host).
  long long max_open_files = 0;
};

struct RunRequest {
  int64_t timeout_ms = 60000;
  size_t output_limit = SIZE_MAX;  // bytes passed to the sink; the rest is counted and dropped
  std::string_view stdin_data;     // fed to stdin, then closed (empty: stdin is empty)
  const mlpt_sink* sink = nullptr;
  std::function<void()> kill_tree;    // kills every process of the command (default: its group)
  std::function<bool()> cancelled;    // polled; true kills the command
};

struct RunResult {
  int exit_code = 0;  // status; 128+N for signal N; -1 when timed out
  bool timed_out = false;
  bool cancelled = false;
  bool truncated = false;
  uint64_t dropped = 0;
};

// Throws mlpt::sdk::Error(INTERNAL) when the child could not be set up (naming the step).
RunResult run_process(const ChildSetup& setup, const RunRequest& request);

}  // namespace mlpt::sandbox
