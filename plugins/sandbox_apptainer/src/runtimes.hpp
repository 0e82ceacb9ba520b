// The two runtimes behind the "apptainer" sandbox component, and what they share: commands run as
// `/bin/sh -c` (run_shell), files are read and written by small shell scripts run inside the
// sandbox (so paths resolve exactly as the sandbox sees them, symlinks included, binary-safe).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cgroup.hpp"
#include "config.hpp"
#include "host_capacity.hpp"
#include "image_store.hpp"
#include "mlpt/sdk/sandbox.hpp"
#include "process.hpp"

namespace mlpt::sandbox {

// Quotes `s` for /bin/sh.
std::string shell_quote(std::string_view s);
// Scripts for read_file (exit 101: missing, 102: not a regular file, 103: larger than `max_bytes`;
// reads at most max_bytes + 1) and write_file (stdin = content).
std::string read_file_script(std::string_view path, size_t max_bytes);
std::string write_file_script(std::string_view path, uint32_t mode);

class ShellSandbox : public sdk::Sandbox {
 public:
  void exec(mlpt_sandbox_exec_args& args) override;
  void read_file(std::string_view path, const mlpt_sink* content) override;
  void write_file(std::string_view path, std::string_view content, uint32_t mode) override;

 protected:
  ShellSandbox(const RuntimeConfig& config, int64_t open_files_per_process)
      : config_(config), open_files_per_process_(open_files_per_process) {}
  // Runs `command` inside; workdir absolute. Thread-safe per sandbox (serialised here).
  virtual RunResult run_shell(const std::string& command, const std::string& workdir, int64_t timeout_ms,
                              size_t output_limit, std::string_view stdin_data, const mlpt_sink* sink) = 0;
  // Runs a prepared child in its own pid namespace and in `cgroup` when there is one (which then
  // also kills the whole tree on timeout), with the open-file limit, the output limit and
  // cancellation applied.
  RunResult run_contained(ChildSetup setup, Cgroup* cgroup, int64_t timeout_ms, size_t output_limit,
                          std::string_view stdin_data, const mlpt_sink* sink) const;
  const RuntimeConfig& config_;
  const int64_t open_files_per_process_;  // RLIMIT_NOFILE of every process (host_capacity.hpp)
  std::mutex mutex_;
};

// ---- bwrap: the namespace runtime ----

struct BwrapPlan {
  std::string root;  // merged overlay dir on the host
  std::vector<HostBind> binds;
  std::vector<std::pair<std::string, std::string>> env;  // complete, in order
  std::string workdir, command;
  bool seccomp = true;  // `--seccomp 4`: the program arrives on descriptor 4
};
// The bwrap argv (argv[0] = bwrap) for one command. Pure, so tests can read it.
std::vector<std::string> bwrap_argv(const std::string& bwrap, const BwrapPlan& plan);

class BwrapRuntime : public sdk::SandboxRuntime {
 public:
  explicit BwrapRuntime(RuntimeConfig config);
  ~BwrapRuntime() override;
  std::string_view name() const override { return "bwrap"; }
  std::unique_ptr<sdk::Sandbox> create(const mlpt_sandbox_create_args& args) override;

  const RuntimeConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  const std::optional<CgroupParents>& cgroups() const { return cgroups_; }
  const std::string& owner_tag() const { return tag_; }
  const std::string& seccomp_program() const { return seccomp_; }
  const SandboxSizing& sizing() const { return sizing_; }
  std::string bwrap_path;

 private:
  RuntimeConfig config_;
  std::string seccomp_;
  SandboxSizing sizing_;
  uint64_t budget_bytes_ = 0;
  std::string tag_, dir_;
  std::optional<CgroupParents> cgroups_;
  std::unique_ptr<ImageStore> images_;
  std::atomic<uint64_t> next_{0};
};

// ---- apptainer: the reference's container runtime (untested here: no apptainer on this host) ----

struct ApptainerPlan {
  std::string image, overlay_dir, workdir, command;
  std::vector<HostBind> binds;
  std::vector<std::pair<std::string, std::string>> env;
  std::string seccomp_profile;  // OCI seccomp JSON file; empty: none
};
std::vector<std::string> apptainer_exec_argv(const std::string& apptainer, const ApptainerPlan& plan);

class ApptainerRuntime : public sdk::SandboxRuntime {
 public:
  explicit ApptainerRuntime(RuntimeConfig config);
  ~ApptainerRuntime() override;
  std::string_view name() const override { return "apptainer"; }
  std::unique_ptr<sdk::Sandbox> create(const mlpt_sandbox_create_args& args) override;

  std::string apptainer_path;

 private:
  RuntimeConfig config_;
  std::string tag_, dir_, seccomp_profile_;
  SandboxSizing sizing_;
  uint64_t budget_bytes_ = 0;
  std::optional<CgroupParents> cgroups_;
  std::atomic<uint64_t> next_{0};
};

// The memory limit (bytes) for a create call: its own (refused above the sandbox budget) or the
// runtime's default.
long long sandbox_memory_bytes(int64_t requested_mb, const SandboxSizing& sizing, uint64_t budget_bytes);

// Picks and builds the runtime that the config asks for ("auto": apptainer when on PATH).
std::unique_ptr<sdk::SandboxRuntime> make_runtime(std::string_view config_json);

}  // namespace mlpt::sandbox
