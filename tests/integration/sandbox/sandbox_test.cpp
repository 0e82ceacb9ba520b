// The sandbox plugin as the host sees it: loaded through the core loader, driven through the C
// table. Isolation (network, pids, environment), the writable layer and its disposal, timeouts
// that kill whole process trees, limits, output caps, binary data, concurrency and cleanup.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/plugin/plugin.hpp"
#include "mlpt/sandbox.h"
#include "test_image.hpp"

namespace fs = std::filesystem;
using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;

namespace {

std::string state_dir() { return "/dev/shm/mlpt-sbtest-state-" + std::to_string(::getpid()); }

struct Loaded {
  HostServices host;
  std::shared_ptr<Plugin> plugin =
      Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_sandbox_apptainer.so", host);
  mlpt::plugin::Component comp = plugin->component(MLPT_COMPONENT_SANDBOX, "apptainer");
  const mlpt_sandbox_api* api = comp.table<mlpt_sandbox_api>();
};
Loaded& loaded() {
  static Loaded l;
  return l;
}

// One runtime over the C table.
struct Runtime {
  mlpt_sandbox_runtime* rt = nullptr;
  std::string name;
  explicit Runtime(const std::string& extra = "") {
    std::string cfg = R"({"runtime": "bwrap", "state_dir": ")" + state_dir() + "\"" + extra + "}";
    mlpt_sandbox_runtime_create_args a{MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE, {cfg.data(), cfg.size()}, nullptr, {}};
    mlpt::plugin::check(loaded().comp, loaded().api->runtime_create(&a), "runtime_create");
    rt = a.runtime;
    name.assign(a.out_runtime_name.data, a.out_runtime_name.size);
  }
  ~Runtime() { loaded().api->runtime_destroy(rt); }
};
Runtime& runtime() {
  sandbox_test::scratch_dir();
  static sandbox_test::RemoveAtExit state{state_dir()};
  static Runtime r;
  return r;
}

struct Result {
  int32_t code;
  bool timed_out, truncated;
  std::string out;
};

class Box {
 public:
  explicit Box(const std::string& image = sandbox_test::test_image(), int64_t mem = 0, int64_t procs = 0,
               Runtime& rt = runtime()) {
    mlpt_sandbox_create_args a{MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE, rt.rt, {image.data(), image.size()}, mem, procs, nullptr};
    mlpt::plugin::check(loaded().comp, api()->create(&a), "create");
    s_ = a.sandbox;
  }
  ~Box() { api()->destroy(s_); }
  Box(const Box&) = delete;
  Box& operator=(const Box&) = delete;

  Result exec(const std::string& cmd, int64_t timeout_ms = 20000, size_t limit = 0, const std::string& workdir = "") {
    std::string out;
    mlpt_sink sink{MLPT_SINK_STRUCT_SIZE, &out,
                   [](void* ctx, const char* d, size_t n) { static_cast<std::string*>(ctx)->append(d, n); }};
    mlpt_sandbox_exec_args a{};
    a.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
    a.sandbox = s_;
    a.command = {cmd.data(), cmd.size()};
    a.workdir = {workdir.data(), workdir.size()};
    a.timeout_ms = timeout_ms;
    a.output_limit = limit;
    a.output = &sink;
    mlpt::plugin::check(loaded().comp, api()->exec(&a), "exec " + cmd);
    return {a.out_exit_code, a.out_timed_out != 0, a.out_output_truncated != 0, out};
  }
  std::string read(const std::string& path) {
    std::string out;
    mlpt_sink sink{MLPT_SINK_STRUCT_SIZE, &out,
                   [](void* ctx, const char* d, size_t n) { static_cast<std::string*>(ctx)->append(d, n); }};
    mlpt_sandbox_read_file_args a{MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE, s_, {path.data(), path.size()}, &sink};
    mlpt::plugin::check(loaded().comp, api()->read_file(&a), "read_file " + path);
    return out;
  }
  void write(const std::string& path, const std::string& content, uint32_t mode = 0644) {
    mlpt_sandbox_write_file_args a{MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE, s_, {path.data(), path.size()},
                                   {content.data(), content.size()}, mode};
    mlpt::plugin::check(loaded().comp, api()->write_file(&a), "write_file " + path);
  }

 private:
  static const mlpt_sandbox_api* api() { return loaded().api; }
  mlpt_sandbox* s_ = nullptr;
};

mlpt_error_code error_code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const mlpt::Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  return MLPT_OK;
}

// Host processes whose command line contains `needle`.
int host_processes_with(const std::string& needle) {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd;
    try {
      std::ifstream f(e.path() / "cmdline");
      cmd.assign(std::istreambuf_iterator<char>(f), {});
    } catch (const std::ios_base::failure&) {
      continue;  // it exited while being read (ESRCH): gone, so not counted
    }
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos) ++n;
  }
  return n;
}

int mounts_under(const std::string& dir) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  int n = 0;
  while (std::getline(f, line))
    if (line.find(dir) != std::string::npos) ++n;
  return n;
}

size_t entries(const fs::path& d) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); ++it) ++n;
  return n;
}

// The runtime's sandboxes folder (one runtime folder per runtime under the state dir).
size_t sandbox_dirs() {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(state_dir())) n += entries(e.path() / "sandboxes");
  return n;
}

}  // namespace

TEST_CASE("the bwrap runtime runs commands in /testbed with the image's files") {
  CHECK(runtime().name == "bwrap");
  Box b;
  auto r = b.exec("pwd; cat hello.py; ls r2e_tests; exit 3");
  CHECK(r.code == 3);
  CHECK(r.out == "/testbed\ndef greet():\n    return 'hi'\ntest_hello.py\n");
  CHECK_FALSE(r.timed_out);
  CHECK(b.exec("echo $0", 5000, 0, "/tmp").out == "/bin/sh\n");
  CHECK(b.exec("pwd", 5000, 0, "/tmp").out == "/tmp\n");
  CHECK(b.exec("kill -9 $$").code == 128 + 9);
  // The host's Python and pytest, bound read-only by the image's binds file, run the hidden tests.
  auto t = b.exec("python3 -m pytest -q -p no:cacheprovider r2e_tests 2>&1 | tail -1", 60000);
  CHECK(t.out.find("1 passed") != std::string::npos);
  CHECK(b.exec("touch /usr/mlpt-should-fail").code != 0);
}

TEST_CASE("no network but loopback, a fresh pid namespace, a clean environment") {
  ::setenv("MLPT_HOST_SECRET", "leak", 1);
  Box b;
  auto net = b.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
  CHECK(net.out == "lo\n");
  CHECK(b.exec("cat /proc/1/comm").out == "bwrap\n");
  auto pids = b.exec("ls /proc | grep -c '^[0-9]'");
  CHECK(std::stoi(pids.out) <= 4);  // init, sh, ls, grep
  auto env = b.exec("env | sort");
  CHECK(env.out.find("MLPT_HOST_SECRET") == std::string::npos);
  CHECK(env.out.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n") != std::string::npos);
  CHECK(env.out.find("HOME=/root\n") != std::string::npos);
  CHECK(env.out.find("LANG=C.UTF-8\n") != std::string::npos);
  CHECK(env.out.find("PYTHONDONTWRITEBYTECODE=1\n") != std::string::npos);  // from the image's file
  CHECK(b.exec("grep CapEff /proc/self/status").out == "CapEff:\t0000000000000000\n");
}

TEST_CASE("writes persist within a sandbox and vanish with it, deletions hide image files") {
  {
    Box a;
    REQUIRE(a.exec("echo changed > hello.py && mkdir -p new/dir && echo x > new/dir/f && rm -rf r2e_tests run_tests.sh").code == 0);
    CHECK(a.exec("cat hello.py").out == "changed\n");
    CHECK(a.exec("test -e r2e_tests || test -e run_tests.sh").code == 1);
    CHECK(a.exec("ls").out == "hello.py\nnew\n");
    CHECK(a.exec("echo t > /tmp/t && echo r > /root/r && cat /tmp/t /root/r").out == "t\nr\n");
    CHECK(a.exec("cat /tmp/t").out == "t\n");
  }
  Box fresh;
  CHECK(fresh.exec("cat hello.py").out == "def greet():\n    return 'hi'\n");
  CHECK(fresh.exec("ls; test -e /tmp/t; echo $?").out == "hello.py\nr2e_tests\nrun_tests.sh\n1\n");
}

TEST_CASE("read_file and write_file are binary-safe and make parent directories") {
  Box b;
  std::string bytes;
  for (int i = 0; i < 256 * 64; ++i) bytes += static_cast<char>(i % 256);
  b.write("/testbed/deep/er/blob.bin", bytes, 0600);
  CHECK(b.read("/testbed/deep/er/blob.bin") == bytes);
  CHECK(b.exec("stat -c %a deep/er/blob.bin").out == "600\n");
  CHECK(b.exec("cat deep/er/blob.bin", 5000, 1 << 20).out == bytes);  // binary output through exec
  b.write("/testbed/hello.py", "");
  CHECK(b.read("/testbed/hello.py").empty());
  b.write("/testbed/q 'x'.txt", "quoted");
  CHECK(b.read("/testbed/q 'x'.txt") == "quoted");
  CHECK(error_code_of([&] { b.read("/testbed/missing"); }) == MLPT_NOT_FOUND);
  CHECK(error_code_of([&] { b.read("/testbed"); }) == MLPT_INVALID_ARGUMENT);
  CHECK(error_code_of([&] { b.read("relative"); }) == MLPT_INVALID_ARGUMENT);
}

TEST_CASE("a timeout kills the whole tree of sleeping children") {
  Box b;
  auto t0 = std::chrono::steady_clock::now();
  auto r = b.exec("sleep 987.61 & (sleep 987.61 &) ; sh -c 'sleep 987.61 & sleep 987.61' & sleep 987.61", 700);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK(r.code == -1);
  CHECK(s < 10);
  CHECK(host_processes_with("sleep 987.61") == 0);
  CHECK(b.exec("echo alive").out == "alive\n");  // the sandbox is still usable
}

TEST_CASE("the process limit holds against a fork bomb") {
  Box b(sandbox_test::test_image(), 0, 40);
  // Forks until the kernel refuses (EAGAIN = 11): the cgroup's pids.max counts every task.
  auto r = b.exec("python3 -c '\nimport os, time\nn = 0\ntry:\n    while n < 200:\n        if os.fork() == 0:\n"
                  "            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print(n, e.errno)\n'",
                  20000);
  INFO(r.out);
  REQUIRE(r.out.find(' ') != std::string::npos);
  CHECK(std::stoi(r.out) < 40);
  CHECK(r.out.substr(r.out.find(' ')) == " 11\n");
  auto bomb = b.exec("f() { f | f & }; f; sleep 2", 4000);
  CHECK((bomb.timed_out || bomb.code >= 0));
  CHECK(b.exec("echo survived").out == "survived\n");
}

TEST_CASE("the memory limit kills a command that exceeds it") {
  Box b(sandbox_test::test_image(), 64, 0);
  auto r = b.exec("python3 -c 'a = bytearray(256 * 1024 * 1024); print(len(a))'", 30000);
  CHECK(r.code != 0);
  CHECK(r.out.find("268435456") == std::string::npos);
  CHECK(b.exec("python3 -c 'a = bytearray(8 * 1024 * 1024); print(len(a))'").out == "8388608\n");
}

TEST_CASE("100 MB of output is capped at the limit and flagged") {
  Box b;
  auto r = b.exec("head -c 100000000 /dev/zero; echo done >&2; exit 4", 60000);
  CHECK(r.truncated);
  CHECK(r.out.size() == (1u << 20));  // the default cap
  CHECK(r.code == 4);
  auto small = b.exec("printf 'abcdef'", 5000, 3);
  CHECK(small.out == "abc");
  CHECK(small.truncated);
  CHECK_FALSE(b.exec("printf 'abc'", 5000, 3).truncated);
}

TEST_CASE("16 sandboxes at once do not see each other") {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  std::string bad;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      try {
        Box b;
        b.write("/testbed/id", std::to_string(i));
        auto r = b.exec("sleep 0.2; cat id; ls /testbed | wc -l");
        if (r.out == std::to_string(i) + "4\n" && b.read("/testbed/id") == std::to_string(i)) ++good;
        else bad = r.out;
      } catch (const std::exception& e) {
        WARN(e.what());
      }
    });
  for (auto& t : threads) t.join();
  INFO("one sandbox printed: " << bad);
  CHECK(good == 16);
  CHECK(sandbox_dirs() == 0);
}

TEST_CASE("nothing leaks after destroy or after a SIGKILLed command") {
  { Box warm; }  // the runtime exists, images may stay mounted (keep_mounted)
  int mounts_before = mounts_under(state_dir());
  {
    Box b;
    CHECK(b.exec("sleep 987.62 & kill -9 $$").code == 137);
    b.exec("sleep 987.62 &");  // a background child dies with the command
  }
  CHECK(mounts_under(state_dir()) == mounts_before);
  CHECK(sandbox_dirs() == 0);
  CHECK(host_processes_with("sleep 987.62") == 0);
}

TEST_CASE("a host killed mid-command leaves nothing the next runtime does not sweep") {
  sandbox_test::test_image();
  std::string dir = state_dir() + "-killed";
  pid_t child = ::fork();
  if (child == 0) {
    // A host with its own runtime that is SIGKILLed while a command runs.
    try {
      std::string extra = R"(, "state_dir": ")" + dir + "\"";
      std::string cfg = R"({"runtime": "bwrap")" + extra + "}";
      mlpt_sandbox_runtime_create_args a{MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE, {cfg.data(), cfg.size()}, nullptr, {}};
      if (loaded().api->runtime_create(&a)) ::_exit(3);
      std::string img = sandbox_test::test_image();
      mlpt_sandbox_create_args c{MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE, a.runtime, {img.data(), img.size()}, 0, 0, nullptr};
      if (loaded().api->create(&c)) ::_exit(4);
      std::string cmd = "sleep 987.63 & sleep 987.63";
      mlpt_sandbox_exec_args e{};
      e.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
      e.sandbox = c.sandbox;
      e.command = {cmd.data(), cmd.size()};
      e.timeout_ms = 60000;
      loaded().api->exec(&e);
    } catch (...) {
    }
    ::_exit(5);
  }
  for (int i = 0; i < 200 && host_processes_with("sleep 987.63") < 2; ++i) ::usleep(20000);
  CHECK(host_processes_with("sleep 987.63") >= 1);
  ::kill(child, SIGKILL);
  int status;
  ::waitpid(child, &status, 0);
  for (int i = 0; i < 100 && host_processes_with("sleep 987.63") > 0; ++i) ::usleep(20000);
  if (::getenv("MLPT_SBTEST_DEBUG")) ::system("ps -eo pid,ppid,pgid,stat,cmd | grep 987.63 | grep -v grep; grep -h . /sys/fs/cgroup/pids/mlpt-sandbox-*/cgroup.procs");
  CHECK(host_processes_with("sleep 987.63") == 0);  // died with the host (death signals)
  CHECK(entries(dir) == 1);                         // the dead host's state is still there
  {
    Runtime next(R"(, "state_dir": ")" + dir + "\"");  // sweeps
    (void)next;
    CHECK(entries(dir) == 1);  // only the new runtime's own folder
    CHECK(mounts_under(dir) == 0);
  }
  CHECK(entries(dir) == 0);
  fs::remove_all(dir);
}

TEST_CASE("bad images and bad arguments give clear errors") {
  std::string msg;
  CHECK(error_code_of([&] { Box b("/nonexistent/image.sif"); }, &msg) == MLPT_NOT_FOUND);
  CHECK(msg.find("/nonexistent/image.sif") != std::string::npos);
  fs::path bad = sandbox_test::scratch_dir() / "garbage.sif";
  sandbox_test::put(bad, std::string(5000, 'x'));
  CHECK(error_code_of([&] { Box b(bad.string()); }, &msg) == MLPT_INVALID_ARGUMENT);
  CHECK(msg.find("magic") != std::string::npos);
  fs::path cut = sandbox_test::scratch_dir() / "cut.sif";
  fs::copy_file(sandbox_test::test_image(), cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, 33000);
  CHECK(error_code_of([&] { Box b(cut.string()); }, &msg) == MLPT_INVALID_ARGUMENT);
  CHECK(msg.find("truncated") != std::string::npos);
  Box b;
  CHECK(error_code_of([&] { b.exec("true", 0); }) == MLPT_INVALID_ARGUMENT);
  CHECK(error_code_of([&] { b.exec("true", 1000, 0, "relative"); }) == MLPT_INVALID_ARGUMENT);
  CHECK(error_code_of([&] { Runtime r(R"(, "no_such_key": 1)"); }, &msg) == MLPT_INVALID_ARGUMENT);
  CHECK(msg.find("no_such_key") != std::string::npos);
}

TEST_CASE("commands are root inside a user namespace and the sandbox uid outside, never the host's root") {
  Box b;
  CHECK(b.exec("id -u").out == "0\n");
  // uid_map: inside 0 is outside 65534 (the default sandbox uid), one id wide.
  auto map = b.exec("cat /proc/self/uid_map | tr -s ' '");
  CHECK(map.out == " 0 65534 1\n");
  // Seen from the host: the file a command writes belongs to the sandbox uid, and so does its process.
  REQUIRE(b.exec("echo x > /testbed/owned_by_whom").code == 0);
  int found = 0;
  for (auto& owner : fs::directory_iterator(state_dir()))
    for (auto& sb : fs::directory_iterator(owner.path() / "sandboxes")) {
      struct stat st {};
      if (::stat((sb.path() / "layer/upper/testbed/owned_by_whom").c_str(), &st) == 0) {
        ++found;
        CHECK(st.st_uid == 65534u);
        CHECK(st.st_gid == 65534u);
      }
    }
  CHECK(found == 1);
  // A process of the sandbox, found on the host by its command line.
  std::thread sleeper([&] { b.exec("sleep 5.4321", 20000); });
  int host_uid = -1;
  for (int i = 0; i < 200 && host_uid < 0; ++i) {
    for (auto& e : fs::directory_iterator("/proc")) {
      std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), {});
      if (cmd.rfind(std::string("sleep\0" "5.4321", 12), 0) != 0) continue;
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0) host_uid = static_cast<int>(st.st_uid);
    }
    if (host_uid < 0) ::usleep(20000);
  }
  sleeper.join();
  CHECK(host_uid == 65534);
}

TEST_CASE("kernel interfaces are read-only or absent, capabilities are dropped") {
  Box b;
  std::string host_core_pattern;
  {
    std::ifstream f("/proc/sys/kernel/core_pattern");
    std::getline(f, host_core_pattern);
  }
  // Host-wide and namespace-owned settings alike.
  for (const char* knob : {"kernel/core_pattern", "kernel/hostname", "vm/drop_caches", "kernel/sysrq", "net/ipv4/ip_forward"}) {
    auto r = b.exec(std::string("echo 1 > /proc/sys/") + knob);
    INFO(knob << ": " << r.out);
    CHECK(r.code != 0);
  }
  {
    std::ifstream f("/proc/sys/kernel/core_pattern");
    std::string now;
    std::getline(f, now);
    CHECK(now == host_core_pattern);
  }
  CHECK(b.exec("echo c > /proc/sysrq-trigger").code != 0);
  // /sys: not mounted at all.
  CHECK(b.exec("test -e /sys/kernel || test -e /sys/fs/cgroup").code != 0);
  // Every capability set is empty, and no_new_privs and seccomp are on.
  auto caps = b.exec("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status");
  CHECK(caps.out ==
        "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
        "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");
}

TEST_CASE("the seccomp filter denies what a coding agent never needs") {
  Box b;
  // Raw system calls through ctypes: each must fail with EPERM (1), or ENOSYS (38) for clone3.
  struct Call {
    const char* name;
    long nr;
    const char* args;
    int errno_expected;
  };
  const Call calls[] = {
      {"mount", __NR_mount, "b'none', b'/tmp', b'tmpfs', 0, 0", 1},
      {"umount2", __NR_umount2, "b'/proc', 2", 1},
      {"unshare(CLONE_NEWUSER)", __NR_unshare, "0x10000000", 1},
      {"init_module", __NR_init_module, "0, 0, b''", 1},
      {"finit_module", __NR_finit_module, "0, b'', 0", 1},
      {"keyctl", __NR_keyctl, "0, 0, 0, 0, 0", 1},
      {"add_key", __NR_add_key, "b'user', b'k', b'v', 1, -3", 1},
      {"ptrace(PTRACE_ATTACH, 1)", __NR_ptrace, "16, 1, 0, 0", 1},
      {"bpf", __NR_bpf, "0, 0, 0", 1},
      {"perf_event_open", __NR_perf_event_open, "0, 0, -1, -1, 0", 1},
      {"reboot", __NR_reboot, "0, 0, 0, 0", 1},
      {"kexec_load", __NR_kexec_load, "0, 0, 0, 0", 1},
      {"swapon", __NR_swapon, "b'/x', 0", 1},
      {"open_by_handle_at", __NR_open_by_handle_at, "0, 0, 0", 1},
      {"userfaultfd", __NR_userfaultfd, "0", 1},
      {"io_uring_setup", __NR_io_uring_setup, "1, 0", 1},
      {"clone(CLONE_NEWNS)", __NR_clone, "0x20000 | 17, 0, 0, 0, 0", 1},
      {"clone3", __NR_clone3, "0, 0", 38},
  };
  std::string py = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n";
  for (auto& c : calls)
    py += "r = libc.syscall(" + std::to_string(c.nr) + ", " + c.args + ")\nprint('" + c.name + "', r, ctypes.get_errno())\n";
  auto r = b.exec("python3 -c \"$(cat <<'EOF'\n" + py + "EOF\n)\"", 30000);
  INFO(r.out);
  std::istringstream in(r.out);
  size_t i = 0;
  for (std::string line; std::getline(in, line) && i < std::size(calls); ++i) {
    INFO(line);
    CHECK(line == std::string(calls[i].name) + " -1 " + std::to_string(calls[i].errno_expected));
  }
  CHECK(i == std::size(calls));
  // What agents do use still works: threads, fork, pipes, subprocesses, git.
  CHECK(b.exec("python3 -c 'import threading, subprocess; t = threading.Thread(target=print); t.start(); t.join(); "
               "print(subprocess.run([\"echo\", \"ok\"], capture_output=True).stdout.decode().strip())'")
            .out == "\nok\n");
  CHECK(b.exec("git init -q /tmp/r && cd /tmp/r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --oneline | wc -l").out == "1\n");
}

TEST_CASE("limits come from the host's capacity: a config that cannot fit is refused, the writable layer is bounded") {
  std::string msg;
  // 1000 sandboxes of 8 GiB fit no host this test runs on.
  CHECK(error_code_of([&] { Runtime r(R"(, "max_sandboxes": 1000, "default_memory_limit_mb": 8192)"); }, &msg) == MLPT_FAILED_PRECONDITION);
  CHECK_THAT(msg, Catch::Contains("cannot fit") && Catch::Contains("max_sandboxes = 1000"));
  // One sandbox asking for more than the host has is refused at create.
  CHECK(error_code_of([&] { Box b(sandbox_test::test_image(), 1LL << 30, 0); }, &msg) == MLPT_RESOURCE_EXHAUSTED);
  // A 32 MiB writable layer: a 64 MiB write fails with ENOSPC, the host's /dev/shm is untouched, the sandbox lives on.
  sandbox_test::RemoveAtExit cleanup{state_dir() + "-small"};  // after the runtime is gone
  Runtime small(R"(, "writable_layer_mb": 32, "state_dir": ")" + state_dir() + "-small\"");
  Box b(sandbox_test::test_image(), 0, 0, small);
  auto r = b.exec("head -c 67108864 /dev/zero > /testbed/big; echo status $?; df -m /testbed | tail -1");
  INFO(r.out);
  CHECK(r.out.find("status 0") == std::string::npos);
  CHECK(r.out.find("No space left") != std::string::npos);
  CHECK(b.exec("rm -f /testbed/big && echo ok > /testbed/small && cat /testbed/small").out == "ok\n");
}

namespace {
// The host's slab (kernel object caches) in bytes, from /proc/meminfo.
long long host_slab_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "Slab:") return kb * 1024;
  return -1;
}
}  // namespace

// Class: a sandbox holds kernel memory through open files (each a struct file, and for a new file or
// a pipe an inode and dentry too), which a memory cgroup need not be charged for. RLIMIT_NOFILE is
// per process, so before it was bounded a sandbox could hold the host's 20000 x its 1024 processes.
TEST_CASE(
    "open files are bounded per process, and a sandbox holding all it can keeps the host's slab within the "
    "bound") {
  const long long mem_mb = 1024, procs = 1024;
  // The documented rule: memory limit / (processes x 4096 bytes), between 64 and 1024.
  const long long expected_files = std::clamp<long long>(mem_mb * 1024 * 1024 / (procs * 4096), 64, 1024);
  Box b(sandbox_test::test_image(), mem_mb, procs);
  CHECK(b.exec("ulimit -n; ulimit -Hn").out ==
        std::to_string(expected_files) + "\n" + std::to_string(expected_files) + "\n");
  // Raising the hard limit needs CAP_SYS_RESOURCE on the host, which root inside the sandbox lacks.
  CHECK(b.exec("ulimit -n 100000 2>/dev/null && echo raised || echo refused").out == "refused\n");
  CHECK(b.exec("python3 -c 'import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))' "
               "2>&1 | tail -1")
            .out.find("Error") != std::string::npos);

  // 100 processes each open new files and pipes until refused, then hold them while the host looks.
  const int holders = 100;
  const std::string attack =
      "python3 -c '\nimport os, sys, time\nfor k in range(" + std::to_string(holders) +
      "):\n    if os.fork() == 0:\n        fds, i = [], 0\n        try:\n            while True:\n"
      "                fds.extend(os.pipe()) if i % 2 else fds.append(os.open(\"/tmp/f%d_%d\" % (k, i), "
      "os.O_CREAT | os.O_RDWR))\n"
      "                i += 1\n        except OSError:\n            pass\n"
      "        os.close(fds.pop())\n        open(\"/tmp/held_%d\" % k, \"w\").write(\"%d\\n\" % (len(fds) + "
      "1))\n        time.sleep(8)\n        os._exit(0)\n"
      "while len([f for f in os.listdir(\"/tmp\") if f.startswith(\"held_\")]) < " +
      std::to_string(holders) +
      ":\n    time.sleep(0.05)\nprint(\"holding\", flush=True)\nos.wait()\n'; cat /tmp/held_*";
  const long long before = host_slab_bytes();
  std::atomic<long long> peak{before};
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done) {
      peak = std::max(peak.load(), host_slab_bytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  Result r = b.exec(attack, 120000);
  done = true;
  watch.join();
  INFO(r.out.substr(0, 2000));
  REQUIRE(r.out.rfind("holding\n", 0) == 0);
  // Each holder opened files until its limit (less the few it had at start), never past it.
  std::istringstream counts(r.out.substr(8));
  long long held = 0, n = 0;
  int holders_seen = 0;
  while (counts >> n) {
    CHECK(n <= expected_files);
    CHECK(n >= expected_files - 16);
    held += n;
    ++holders_seen;
  }
  CHECK(holders_seen == holders);
  // The host's slab grew by no more than the bound the limit is derived from (4096 bytes per open
  // file) for the files held, plus the 100 processes themselves (task and mm structs, a few hundred
  // memory areas of a Python process at a few hundred bytes each, the descriptor table: under
  // 128 KiB each); an unbounded limit let this attack hold 20000 files per process.
  const long long grown = peak - before;
  const long long bound = held * 4096 + holders * 128 * 1024;
  WARN("host slab grew " << grown / 1024 << " KiB while " << held << " files were held ("
                         << (held ? grown / held : 0) << " bytes per file; bound " << bound / 1024
                         << " KiB)");
  CHECK(grown <= bound);
  CHECK(b.exec("echo survived").out == "survived\n");
}
