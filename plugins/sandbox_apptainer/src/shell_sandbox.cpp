#include <cstdio>

#include "runtimes.hpp"

namespace mlpt::sandbox {

using sdk::Error;

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string read_file_script(std::string_view path, size_t max_bytes) {
  std::string p = shell_quote(path), n = std::to_string(max_bytes);
  // The size is checked before reading and the read itself is bounded (one byte past the limit
  // tells a file that grew from one that fits).
  return "[ -e " + p + " ] || exit 101; [ -f " + p + " ] || exit 102; [ \"$(stat -L -c %s -- " + p + ")\" -le " + n +
         " ] || exit 103; exec head -c " + std::to_string(max_bytes + 1) + " -- " + p;
}

std::string write_file_script(std::string_view path, uint32_t mode) {
  char m[16];
  std::snprintf(m, sizeof m, "%o", mode & 07777u);
  std::string p = shell_quote(path);
  return "umask 077; d=$(dirname -- " + p + ") && mkdir -p -- \"$d\" && cat > " + p + " && chmod " + m + " -- " + p;
}

namespace {
void check_absolute(std::string_view path, const char* what) {
  if (path.empty() || path[0] != '/')
    throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " must be an absolute path inside the sandbox, got \"" +
                                           std::string(path) + "\"");
  if (path.find('\0') != std::string_view::npos) throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " contains NUL");
}
}  // namespace

RunResult ShellSandbox::run_contained(ChildSetup setup, Cgroup* cgroup, int64_t timeout_ms, size_t output_limit,
                                     std::string_view stdin_data, const mlpt_sink* sink) const {
  if (cgroup) setup.cgroup_procs = cgroup->procs_files();
  setup.max_open_files = open_files_per_process_;
  setup.own_pid_namespace = true;
  RunRequest r;
  r.timeout_ms = timeout_ms;
  r.output_limit = output_limit;
  r.stdin_data = stdin_data;
  r.sink = sink;
  if (cgroup) r.kill_tree = [cgroup] { cgroup->kill_all(); };
  r.cancelled = [] { return sdk::cancelled(); };
  return run_process(setup, r);
}

long long sandbox_memory_bytes(int64_t requested_mb, const SandboxSizing& sizing, uint64_t budget_bytes) {
  const long long bytes = (requested_mb ? requested_mb : sizing.memory_limit_mb) * 1024LL * 1024LL;
  if (static_cast<uint64_t>(bytes) > budget_bytes)
    throw Error(MLPT_RESOURCE_EXHAUSTED, "a sandbox of " + std::to_string(requested_mb) + " MiB does not fit the " +
                                             std::to_string(budget_bytes >> 20) + " MiB this host has for sandboxes");
  return bytes;
}

void ShellSandbox::exec(mlpt_sandbox_exec_args& a) {
  std::string workdir(sdk::view(a.workdir));
  if (workdir.empty()) workdir = "/testbed";
  check_absolute(workdir, "workdir");
  if (a.timeout_ms <= 0) throw Error(MLPT_INVALID_ARGUMENT, "timeout_ms must be > 0, got " + std::to_string(a.timeout_ms));
  std::string command(sdk::view(a.command));
  if (command.find('\0') != std::string::npos) throw Error(MLPT_INVALID_ARGUMENT, "command contains a NUL byte");
  size_t limit = a.output_limit ? a.output_limit : config_.default_output_limit;
  std::lock_guard<std::mutex> g(mutex_);
  RunResult r = run_shell(command, workdir, a.timeout_ms, limit, {}, a.output);
  if (r.cancelled) throw Error(MLPT_CANCELLED, "the run is being stopped; the command was killed");
  a.out_exit_code = r.exit_code;
  a.out_timed_out = r.timed_out ? 1 : 0;
  a.out_output_truncated = r.truncated ? 1 : 0;
}

void ShellSandbox::read_file(std::string_view path, const mlpt_sink* content) {
  check_absolute(path, "path");
  sdk::StringSink out;
  std::lock_guard<std::mutex> g(mutex_);
  const size_t max = config_.max_read_file_bytes;
  RunResult r = run_shell(read_file_script(path, max), "/", config_.file_timeout_ms, max + 1, {}, out.sink());
  if (r.cancelled) throw Error(MLPT_CANCELLED, "the run is being stopped");
  if (r.timed_out) throw Error(MLPT_DEADLINE_EXCEEDED, "reading " + std::string(path) + " timed out");
  if (r.exit_code == 101) throw Error(MLPT_NOT_FOUND, std::string(path) + " does not exist in the sandbox");
  if (r.exit_code == 102) throw Error(MLPT_INVALID_ARGUMENT, std::string(path) + " is not a regular file");
  if (r.exit_code == 103 || (r.exit_code == 0 && out.text().size() > max))
    throw Error(MLPT_RESOURCE_EXHAUSTED, std::string(path) + " is larger than the read limit of " + std::to_string(max) +
                                             " bytes (max_read_file_bytes)");
  if (r.exit_code != 0)
    throw Error(MLPT_INTERNAL, "reading " + std::string(path) + " failed (status " + std::to_string(r.exit_code) +
                                   "): " + out.text().substr(0, 500));
  sdk::write(content, out.text());
}

void ShellSandbox::write_file(std::string_view path, std::string_view content, uint32_t mode) {
  check_absolute(path, "path");
  if (path.back() == '/') throw Error(MLPT_INVALID_ARGUMENT, "path names a directory: " + std::string(path));
  sdk::StringSink out(4096);
  std::lock_guard<std::mutex> g(mutex_);
  RunResult r = run_shell(write_file_script(path, mode), "/", config_.file_timeout_ms, 4096, content, out.sink());
  if (r.cancelled) throw Error(MLPT_CANCELLED, "the run is being stopped");
  if (r.timed_out) throw Error(MLPT_DEADLINE_EXCEEDED, "writing " + std::string(path) + " timed out");
  if (r.exit_code != 0)
    throw Error(MLPT_INTERNAL, "writing " + std::string(path) + " failed (status " + std::to_string(r.exit_code) +
                                   "): " + out.text());
}

}  // namespace mlpt::sandbox
