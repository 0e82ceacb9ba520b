#include <stdlib.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <sstream>
#include <thread>

#include "core/check/conformance/checks.hpp"

namespace mlpt::check::conformance {
namespace {

using nlohmann::json;

// ---- Sandbox confinement: what a command inside may not do to the host ----
// Each probe runs in a fresh sandbox through `run` (command, output) -> exit code, and is safe to
// run where confinement is missing: settings are opened for writing but never written, and the
// denied system calls get arguments that change nothing.
void check_sandbox_confinement(Suite& s, const std::string& name,
                               const std::function<int(const std::string&, std::string*)>& run) {
  s.check(name, "not_host_root", [&](std::string& ev) {
    std::string out;
    run("cat /proc/self/uid_map", &out);
    // Every mapped range "inside outside count" must leave out the host's uid 0.
    std::istringstream in(out);
    bool maps_root = false, any = false;
    for (long long inside, outside, count; in >> inside >> outside >> count;)
      any = true, maps_root |= outside == 0;
    ev = "uid_map: " + json(out.substr(0, 120)).dump();
    return any && !maps_root;
  });
  s.check(name, "kernel_settings_read_only", [&](std::string& ev) {
    std::string out;
    run("for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sys/vm/drop_caches "
        "/proc/sysrq-trigger; do "
        "test -e $f || continue; (: >> $f) 2>/dev/null && echo \"writable $f\"; done; "
        "awk '$5 == \"/sys\" || index($5, \"/sys/\") == 1 { split($6, o, \",\"); if (o[1] != \"ro\") print "
        "\"writable mount \" $5 }' /proc/self/mountinfo",
        &out);
    ev = out.empty() ? "/proc/sys, /proc/sysrq-trigger and /sys are read-only or absent" : out.substr(0, 200);
    return out.empty();
  });
  s.check(name, "no_capabilities", [&](std::string& ev) {
    std::string out;
    run("grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/self/status", &out);
    std::istringstream in(out);
    int sets = 0, empty = 0;
    for (std::string key, value; in >> key >> value;)
      ++sets, empty += value.find_first_not_of('0') == std::string::npos;
    ev = json(out).dump();
    return sets == 4 && empty == 4;
  });
  s.check(name, "seccomp_denies_kernel_interfaces", [&](std::string& ev) {
    struct Probe {
      const char* name;
      long nr;
      const char* args;
    };
    const Probe probes[] = {{"mount", SYS_mount, "b'none', b'/nonexistent', b'tmpfs', 0, 0"},
                            {"unshare", SYS_unshare, "0x10000000"},
                            {"init_module", SYS_init_module, "0, 0, b''"},
                            {"keyctl", SYS_keyctl, "0, -3, 0, 0, 0"},
                            {"ptrace", SYS_ptrace, "16, 1, 0, 0"},
                            {"bpf", SYS_bpf, "0, 0, 0"},
                            {"perf_event_open", SYS_perf_event_open, "0, 0, -1, -1, 0"},
                            {"reboot", SYS_reboot, "0, 0, 0, 0"}};
    std::string py =
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n";
    for (const auto& p : probes)
      py += "r = libc.syscall(" + std::to_string(p.nr) + ", " + p.args + "); print('" + p.name +
            "', r, ctypes.get_errno())\n";
    std::string out;
    run("grep '^Seccomp:' /proc/self/status; command -v python3 >/dev/null || { echo no-python; exit 0; }; "
        "python3 -c \"$(cat <<'EOF'\n" +
            py + "EOF\n)\"",
        &out);
    if (out.find("no-python") != std::string::npos)
      return ev = "the image has no python3 to probe with", false;
    std::istringstream in(out);
    std::string line, allowed;
    bool filtered = false;
    int denied = 0;
    while (std::getline(in, line)) {
      if (line.rfind("Seccomp:", 0) == 0)
        filtered = line.find('2') != std::string::npos;
      else if (line.find(" -1 1") != std::string::npos)
        ++denied;
      else
        allowed += (allowed.empty() ? "" : ", ") + line;
    }
    ev = std::string(filtered ? "seccomp filter on; " : "NO seccomp filter; ") + std::to_string(denied) +
         "/" + std::to_string(std::size(probes)) + " probes refused with EPERM" +
         (allowed.empty() ? "" : "; not refused: " + allowed);
    return filtered && denied == static_cast<int>(std::size(probes));
  });
}

}  // namespace

std::unique_ptr<components::SandboxRuntime> check_sandbox(Suite& s, const plugin::ComponentSet& set,
                                                          const std::string& image, std::atomic<bool>& stop) {
  const auto& comp = set.component(MLPT_COMPONENT_SANDBOX);
  const std::string name = "sandbox " + comp.name;
  std::unique_ptr<components::SandboxRuntime> runtime;
  s.check(name, "runtime_create", [&](std::string& ev) {
    runtime = std::make_unique<components::SandboxRuntime>(comp, set.settings(MLPT_COMPONENT_SANDBOX));
    ev = "runtime " + runtime->runtime_name();
    return true;
  });
  if (!runtime) return nullptr;
  s.check(name, "null_destroy_is_noop", [&](std::string& ev) {
    runtime->binding()->api->destroy(nullptr);
    runtime->binding()->api->runtime_destroy(nullptr);
    ev = "destroy(NULL) and runtime_destroy(NULL) returned";
    return true;
  });
  if (image.empty()) {
    s.skip(name, "isolation", "the first training task names no image");
    return runtime;
  }
  if (!runtime->capabilities().isolates_network)
    s.not_applicable(name, "no_network", "capability isolates_network = 0");
  else
    s.check(name, "no_network", [&](std::string& ev) {
      auto sb = runtime->create(image);
      std::string out;
      exec(*sb, "cat /proc/net/dev", 10000, &out);
      int interfaces = 0;
      bool only_lo = true;
      std::istringstream in(out);
      for (std::string line; std::getline(in, line);)
        if (line.find(':') != std::string::npos)
          ++interfaces, only_lo &= line.find("lo:") != std::string::npos;
      ev = std::to_string(interfaces) + " interface(s) in /proc/net/dev" +
           (only_lo ? ", loopback only" : ", NOT only loopback");
      return only_lo;
    });
  if (!runtime->capabilities().discards_writes)
    s.not_applicable(name, "writable_layer_discarded", "capability discards_writes = 0");
  else
    s.check(name, "writable_layer_discarded", [&](std::string& ev) {
      {
        auto sb = runtime->create(image);
        exec(*sb, "echo conformance > /testbed/.mlpt_conformance_probe", 10000, nullptr);
      }
      auto sb = runtime->create(image);
      int code = exec(*sb, "test -e /testbed/.mlpt_conformance_probe", 10000, nullptr);
      ev = std::string("a file written in one sandbox is ") + (code != 0 ? "absent" : "PRESENT") +
           " in the next from the same image";
      return code != 0;
    });
  s.check(name, "timeout_kills_tree", [&](std::string& ev) {
    auto sb = runtime->create(image);
    bool timed_out = false;
    auto started = std::chrono::steady_clock::now();
    exec(*sb, "sleep 300 & sleep 300 & sleep 300", 1000, nullptr, &timed_out);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::string left;
    exec(*sb, "for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done | grep -c '^sleep$'", 10000, &left);
    const bool none = std::atoi(left.c_str()) == 0;
    ev = std::string("1 s timeout: ") + (timed_out ? "timed out" : "did NOT time out") + " after " +
         std::to_string(took) +
         " s; sleep processes left in the sandbox: " + std::to_string(std::atoi(left.c_str()));
    return timed_out && took < 20 && none;
  });
  s.check(name, "hidden_tests_not_visible", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb,
         "for p in /r2e_tests /testbed/r2e_tests /run_tests.sh /testbed/run_tests.sh; do test -e $p && echo "
         "$p; done; true",
         10000, &out);
    ev = out.empty() ? "no r2e_tests folder or run_tests.sh in the agent's sandbox" : "VISIBLE: " + out;
    return out.empty();
  });
  check_sandbox_confinement(s, name, [&](const std::string& cmd, std::string* out) {
    auto sb = runtime->create(image);
    return exec(*sb, cmd, 30000, out);
  });
  s.check(name, "read_file_bounded", [&](std::string& ev) {
    // A 1 GiB sparse file, a FIFO and a device: none may be read into the host (or block it).
    auto sb = runtime->create(image);
    exec(*sb, "truncate -s 1G /tmp/mlpt_sparse && mkfifo /tmp/mlpt_fifo", 10000, nullptr);
    std::string verdicts;
    bool ok = true;
    for (const char* path : {"/tmp/mlpt_sparse", "/tmp/mlpt_fifo", "/dev/zero"}) {
      size_t got = 0;
      mlpt_sink sink{MLPT_SINK_STRUCT_SIZE, &got,
                     [](void* ctx, const char*, size_t n) { *static_cast<size_t*>(ctx) += n; }};
      mlpt_sandbox_read_file_args a{
          MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE, sb->handle(), {path, std::strlen(path)}, &sink};
      mlpt_error* e = runtime->binding()->api->read_file(&a);
      const auto* errors = runtime->binding()->errors;
      mlpt_error_code code = e ? errors->error_code(e) : MLPT_OK;
      if (e) errors->error_destroy(e);
      const bool refused = code == MLPT_RESOURCE_EXHAUSTED || code == MLPT_INVALID_ARGUMENT;
      ok &= refused && got <= (64u << 20) + 1;
      verdicts += std::string(verdicts.empty() ? "" : "; ") + path + ": " +
                  (refused ? "refused" : "NOT refused") + " (code " + std::to_string(code) + ", " +
                  std::to_string(got) + " bytes read)";
    }
    ev = verdicts;
    return ok;
  });
  // exec's promises (sandbox.h): a clean environment, /testbed by default, output merged in order,
  // capped and binary-safe, 128+N for a signal, and the host's cancellation honoured.
  s.check(name, "clean_environment", [&](std::string& ev) {
    ::setenv("MLPT_CONFORMANCE_HOST_ONLY", "leaked", 1);
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "env", 10000, &out);
    ::unsetenv("MLPT_CONFORMANCE_HOST_ONLY");
    const bool leaked = out.find("MLPT_CONFORMANCE_HOST_ONLY") != std::string::npos;
    ev = std::string("a variable set in the host process is ") + (leaked ? "VISIBLE" : "absent") + " inside";
    return !leaked;
  });
  if (runtime->capabilities().isolates_pids) {
    s.check(name, "fresh_pid_namespace", [&](std::string& ev) {
      auto sb = runtime->create(image);
      std::string out;
      exec(*sb, "ls /proc | grep -c '^[0-9]*$'", 10000, &out);
      const int visible = std::atoi(out.c_str());
      ev = std::to_string(visible) + " processes visible inside (the host has more)";
      return visible > 0 && visible < 10;
    });
  } else {
    s.not_applicable(name, "fresh_pid_namespace", "capability isolates_pids = 0");
  }
  s.check(name, "default_workdir_testbed", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "pwd", 10000, &out);
    ev = "an empty workdir runs in " + json(out).dump();
    return out == "/testbed\n";
  });
  s.check(name, "output_merged_in_order", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "echo one; echo two >&2; echo three", 10000, &out);
    ev = "stdout, stderr, stdout -> " + json(out).dump();
    return out == "one\ntwo\nthree\n";
  });
  s.check(name, "output_limit_truncates", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    bool truncated = false;
    exec(*sb, "head -c 100000 /dev/zero | tr '\\000' x", 10000, &out, nullptr, 100, &truncated);
    ev = "100000 bytes under output_limit 100: " + std::to_string(out.size()) +
         " delivered, truncated flag " + (truncated ? "set" : "NOT set");
    return out.size() == 100 && truncated;
  });
  s.check(name, "binary_output_unchanged", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "printf 'a\\000b\\377\\001'", 10000, &out);
    const std::string want("a\0b\xff\x01", 5);
    ev = std::to_string(out.size()) + " bytes; " + (out == want ? "equal to" : "DIFFERENT from") +
         " the 5 bytes printed (NUL and 0xff included)";
    return out == want;
  });
  s.check(name, "exit_code_of_signal", [&](std::string& ev) {
    auto sb = runtime->create(image);
    int code = exec(*sb, "kill -9 $$", 10000, nullptr);
    ev = "a shell killed by SIGKILL gives exit code " + std::to_string(code) + " (128+9 = 137 promised)";
    return code == 137;
  });
  s.check(name, "files_round_trip", [&](std::string& ev) {
    auto sb = runtime->create(image);
    const std::string path = "/tmp/mlpt_conformance/deep/probe.bin", content("x\0y\n", 4);
    sb->write_file(path, content, 0640);
    const std::string back = sb->read_file(path);
    std::string mode;
    exec(*sb, "stat -c %a " + path, 10000, &mode);
    ev = "write_file into missing parents then read_file: " +
         std::string(back == content ? "same 4 bytes" : "DIFFERENT bytes") + ", mode " + json(mode).dump() +
         " (0640 written)";
    return back == content && mode == "640\n";
  });
  s.check(name, "read_missing_file_not_found", [&](std::string& ev) {
    auto sb = runtime->create(image);
    const std::string path = "/testbed/mlpt_conformance_no_such_file";
    try {
      sb->read_file(path);
    } catch (const Error& e) {
      ev = std::string("read_file of a missing file: code ") + std::to_string(e.code()) + " (" + e.what() +
           ")";
      return e.code() == MLPT_NOT_FOUND;
    }
    ev = "read_file of a missing file SUCCEEDED";
    return false;
  });
  s.check(name, "exec_honours_host_cancellation", [&](std::string& ev) {
    auto sb = runtime->create(image);
    auto running = std::async(std::launch::async, [&] { return exec(*sb, "sleep 60", 120000, nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto signalled = std::chrono::steady_clock::now();
    stop = true;
    const bool returned = running.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    if (!returned) running.wait();  // it ends at the latest after the sleep; report the failure then
    stop = false;
    mlpt_error_code code = MLPT_OK;
    try {
      running.get();
    } catch (const Error& e) {
      code = e.code();
    }
    ev = "`sleep 60` returned " + std::to_string(took) + " s after is_cancelled turned nonzero, code " +
         std::to_string(code) + " (MLPT_CANCELLED = " + std::to_string(MLPT_CANCELLED) + ")";
    return returned && took < 10 && code == MLPT_CANCELLED;
  });
  // Limits, where declared: python3 in the image allocates and forks past them.
  const char* memory_probe =
      "command -v python3 >/dev/null || { echo no-python; exit 0; }; python3 -c 'b = bytearray(512 << 20); "
      "b[::4096] = b\"x\" * len(b[::4096]); print(\"allocated\", len(b))'";
  if (runtime->capabilities().limits_memory) {
    s.check(name, "memory_limit_holds", [&](std::string& ev) {
      auto sb = runtime->create(image, 128, 0);
      std::string out;
      int code = exec(*sb, memory_probe, 30000, &out);
      if (out.find("no-python") != std::string::npos)
        return ev = "the image has no python3 to probe with", false;
      ev = "512 MiB under a 128 MiB limit: exit " + std::to_string(code) +
           (out.find("allocated") == std::string::npos ? ", refused" : ", ALLOCATED");
      return code != 0 && out.find("allocated") == std::string::npos;
    });
  } else {
    s.not_applicable(name, "memory_limit_holds", "capability limits_memory = 0");
  }
  if (runtime->capabilities().limits_processes) {
    s.check(name, "process_limit_holds", [&](std::string& ev) {
      auto sb = runtime->create(image, 0, 32);
      std::string out;
      exec(*sb,
           "command -v python3 >/dev/null || { echo no-python; exit 0; }; python3 -c '\n"
           "import os, time\nn = 0\ntry:\n    for i in range(100):\n        if os.fork() == 0:\n            "
           "time.sleep(3); os._exit(0)\n"
           "        n += 1\nexcept OSError:\n    pass\nprint(\"forked\", n)'",
           30000, &out);
      if (out.find("no-python") != std::string::npos)
        return ev = "the image has no python3 to probe with", false;
      int forked =
          out.find("forked ") == std::string::npos ? -1 : std::atoi(out.c_str() + out.find("forked ") + 7);
      ev = "100 forks under a 32-process limit: " + std::to_string(forked) + " succeeded";
      return forked >= 0 && forked < 32;
    });
  } else {
    s.not_applicable(name, "process_limit_holds", "capability limits_processes = 0");
  }
  return runtime;
}

void check_task_image(Suite& s, const EpisodeEnv& env) {
  const std::string name = "task image";
  if (!env.runtime || env.image.empty())
    return s.skip(name, "no_history_past_the_base", "the combination has no sandbox or the task no image");
  const std::string fix = env.task.value("commit_hash", std::string());
  if (fix.empty()) return s.skip(name, "no_history_past_the_base", "the task record has no commit_hash");
  s.check(name, "no_history_past_the_base", [&](std::string& ev) {
    auto sb = env.runtime->create(env.image);
    std::string out;
    const std::string git = "git -c safe.directory='*' ";
    exec(*sb,
         "cd /testbed || exit 3; " + git + "cat-file -e " + fix +
             " 2>/dev/null && echo FIX-OBJECT-PRESENT; " + git + "log --all --reflog --format=%H | grep -c " +
             fix + " | sed 's/^/fix-in-log /'; " + git +
             "rev-list --all --reflog --not HEAD | wc -l | sed 's/^/commits-past-head /'; " + git +
             "fsck --unreachable --no-reflogs 2>/dev/null | grep -c commit | sed 's/^/unreachable-commits /'",
         60000, &out);
    ev = out.substr(0, 300);
    return out.find("FIX-OBJECT-PRESENT") == std::string::npos &&
           out.find("fix-in-log 0") != std::string::npos &&
           out.find("commits-past-head 0") != std::string::npos &&
           out.find("unreachable-commits 0") != std::string::npos;
  });
}

}  // namespace mlpt::check::conformance
