#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sandbox {
namespace {

using sdk::Error;

enum Step : int { kSetpgid = 1, kPdeathsig, kCgroup, kUnshare, kPrivate, kOverlay, kDropPrivileges, kFileLimit, kDup, kExec };
const char* step_name(int s) {
  switch (s) {
    case kSetpgid: return "setpgid";
    case kPdeathsig: return "prctl(PR_SET_PDEATHSIG)";
    case kCgroup: return "joining the sandbox cgroup";
    case kUnshare: return "unshare(CLONE_NEWNS)";
    case kPrivate: return "making mounts private";
    case kOverlay: return "mounting the sandbox overlay";
    case kDropPrivileges: return "dropping to the sandbox's unprivileged uid";
    case kFileLimit: return "setting RLIMIT_NOFILE";
    case kDup: return "redirecting stdio";
    case kExec: return "exec";
  }
  return "?";
}

int64_t now_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Child side: report (step, errno) on the error pipe and exit.
[[noreturn]] void child_fail(int errfd, int step) {
  int msg[2] = {step, errno};
  ssize_t ignored = ::write(errfd, msg, sizeof msg);
  (void)ignored;
  ::_exit(127);
}

void format_pid(char* buf, pid_t pid) {  // async-signal-safe itoa
  char tmp[24];
  int n = 0;
  unsigned long v = static_cast<unsigned long>(pid);
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  for (int i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n] = '\n';
  buf[n + 1] = 0;
}

}  // namespace

RunResult run_process(const ChildSetup& setup, const RunRequest& req) {
  std::vector<char*> argv, envp;
  for (auto& a : setup.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : setup.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const bool overlay = !setup.overlay_target.empty();

  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) throw Error(MLPT_INTERNAL, std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]), ::close(in_pipe[1]);
    throw Error(MLPT_INTERNAL, std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]), ::close(in_pipe[1]), ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw Error(MLPT_INTERNAL, std::string("pipe: ") + std::strerror(errno));
  }
  // Descriptor 4's data: a pipe the parent fills (within one pipe buffer) and closes before clone.
  int fd4[2] = {-1, -1};
  if (!setup.fd4_data.empty()) {
    if (setup.fd4_data.size() > 65536 || ::pipe2(fd4, O_CLOEXEC) != 0 ||
        ::write(fd4[1], setup.fd4_data.data(), setup.fd4_data.size()) != static_cast<ssize_t>(setup.fd4_data.size())) {
      for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], fd4[0], fd4[1]})
        if (fd >= 0) ::close(fd);
      throw Error(MLPT_INTERNAL, "cannot pass " + std::to_string(setup.fd4_data.size()) + " bytes on descriptor 4");
    }
    ::close(fd4[1]);
  }
  const pid_t parent = ::getpid();
  long flags = SIGCHLD | (setup.own_pid_namespace ? CLONE_NEWPID : 0) | (overlay ? CLONE_NEWNS : 0);
  // A fork-like clone (no new stack): the child continues here, as with fork().
  const pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, nullptr));
  if (pid < 0) {
    int e = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    if (fd4[0] >= 0) ::close(fd4[0]);
    throw Error(MLPT_RESOURCE_EXHAUSTED, std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // ---- child: async-signal-safe calls only ----
    int errfd = err_pipe[1];
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
    if (::setpgid(0, 0) != 0) child_fail(errfd, kSetpgid);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(errfd, kPdeathsig);
    // The host died before the death signal was set (in a new pid namespace the parent reads as 0).
    if (!setup.own_pid_namespace && ::getppid() != parent) ::_exit(127);
    char pidbuf[32];
    format_pid(pidbuf, ::getpid());
    for (auto& f : setup.cgroup_procs) {
      int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) child_fail(errfd, kCgroup);
      if (::write(fd, pidbuf, std::strlen(pidbuf)) < 0) child_fail(errfd, kCgroup);
      ::close(fd);
    }
    if (overlay) {
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(errfd, kPrivate);
      if (::mount("overlay", setup.overlay_target.c_str(), "overlay", 0, setup.overlay_options.c_str()) != 0)
        child_fail(errfd, kOverlay);
    }
    if (setup.run_as_uid >= 0) {
      // Raw calls: this thread only, which is the whole child.
      if (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
          ::syscall(SYS_setresgid, setup.run_as_gid, setup.run_as_gid, setup.run_as_gid) != 0 ||
          ::syscall(SYS_setresuid, setup.run_as_uid, setup.run_as_uid, setup.run_as_uid) != 0)
        child_fail(errfd, kDropPrivileges);
      // A credential change clears the death signal: set it again.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(errfd, kPdeathsig);
      if (!setup.own_pid_namespace && ::getppid() != parent) ::_exit(127);
    }
    if (setup.max_open_files > 0) {
      struct rlimit files = {static_cast<rlim_t>(setup.max_open_files), static_cast<rlim_t>(setup.max_open_files)};
      if (::syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &files, nullptr) != 0) child_fail(errfd, kFileLimit);
    }
    int fd4_src = fd4[0];  // kept clear of 0..4, which are about to be assigned
    if (fd4_src >= 0 && fd4_src < 5 && (fd4_src = ::fcntl(fd4_src, F_DUPFD_CLOEXEC, 5)) < 0) child_fail(errfd, kDup);
    if (::dup2(in_pipe[0], 0) < 0 || ::dup2(out_pipe[1], 1) < 0 || ::dup2(out_pipe[1], 2) < 0)
      child_fail(errfd, kDup);
    // Everything else is O_CLOEXEC in this file; close the host's other descriptors too.
    if (errfd != 3) {
      if (::dup3(errfd, 3, O_CLOEXEC) < 0) child_fail(errfd, kDup);
      errfd = 3;
    }
    unsigned keep_below = 4u;
    if (fd4_src >= 0) {
      if (::dup2(fd4_src, 4) < 0) child_fail(errfd, kDup);  // dup2 clears O_CLOEXEC
      keep_below = 5u;
    }
    ::syscall(SYS_close_range, keep_below, ~0u, 0u);
    ::execve(setup.exe.c_str(), argv.data(), envp.data());
    child_fail(errfd, kExec);
  }
  // ---- parent ----
  if (fd4[0] >= 0) ::close(fd4[0]);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int msg[2] = {0, 0};
  ssize_t got;
  do got = ::read(err_pipe[0], msg, sizeof msg);
  while (got < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof msg)) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw Error(MLPT_INTERNAL, std::string("starting the sandbox command failed at ") + step_name(msg[0]) + ": " +
                                   std::strerror(msg[1]) + " (" + setup.exe + ")");
  }

  RunResult res;
  int in_fd = in_pipe[1], out_fd = out_pipe[0];
  ::fcntl(out_fd, F_SETFL, O_NONBLOCK);
  ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
  size_t in_done = 0;
  if (req.stdin_data.empty()) ::close(in_fd), in_fd = -1;
  size_t passed = 0;
  const int64_t deadline = now_ms() + req.timeout_ms;
  int64_t drain_deadline = -1;  // after a kill: how long to wait for the pipe to close
  auto kill_all = [&] {
    if (req.kill_tree) req.kill_tree();
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  };
  std::vector<char> buf(1 << 16);
  while (out_fd >= 0) {
    int64_t now = now_ms();
    if (drain_deadline < 0) {
      if (req.cancelled && req.cancelled()) {
        res.cancelled = true;
        kill_all();
        drain_deadline = now + 5000;
      } else if (now >= deadline) {
        res.timed_out = true;
        kill_all();
        drain_deadline = now + 5000;
      }
    } else if (now >= drain_deadline) {
      break;  // a writer we do not know of keeps the pipe open; give up on the rest
    }
    int64_t until = drain_deadline >= 0 ? drain_deadline : deadline;
    int wait = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(until - now, 100)));
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {in_fd, POLLOUT, 0}};
    int n = ::poll(fds, in_fd >= 0 ? 2 : 1, wait);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (in_fd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::write(in_fd, req.stdin_data.data() + in_done, req.stdin_data.size() - in_done);
      if (w > 0) in_done += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_done == req.stdin_data.size()) ::close(in_fd), in_fd = -1;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::read(out_fd, buf.data(), buf.size());
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(out_fd), out_fd = -1;
        break;
      }
      if (r > 0) {
        size_t size = static_cast<size_t>(r);
        size_t room = req.output_limit - std::min(req.output_limit, passed);
        size_t take = std::min(room, size);
        if (take && req.sink && req.sink->write) req.sink->write(req.sink->ctx, buf.data(), take);
        passed += take;
        if (take < size) {
          res.truncated = true;
          res.dropped += size - take;
        }
      }
    }
  }
  if (out_fd >= 0) ::close(out_fd);
  if (in_fd >= 0) ::close(in_fd);
  int status = 0;
  // Output closed: the command is exiting, or it closed its output and runs on; wait for it
  // until the deadline like for output.
  bool killed = res.timed_out || res.cancelled;
  for (int64_t nap = 200;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    if (!killed && ((req.cancelled && req.cancelled()) || now_ms() >= deadline)) {
      if (now_ms() >= deadline) res.timed_out = true;
      else res.cancelled = true;
      kill_all();
      killed = true;
    }
    ::usleep(static_cast<useconds_t>(nap));
    nap = std::min<int64_t>(nap * 2, 10000);
  }
  if (req.kill_tree) req.kill_tree();  // nothing of the command survives it
  if (res.timed_out || res.cancelled) res.exit_code = -1;
  else res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

}  // namespace mlpt::sandbox
