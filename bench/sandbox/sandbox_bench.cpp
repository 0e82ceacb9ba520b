// Cost of a sandbox: create / exec(`true`) / destroy, one at a time and with N = 1, 4, 16 running
// concurrently, as ratios to two baselines measured in the same run: bare bubblewrap running
// /bin/true in the same image's root with the same binds (what isolation itself costs, without
// the plugin), and a plain fork+exec of /bin/true on the host. Each baseline is named in full.
//   bench_sandbox [iterations per thread, default 20] [sandbox plugin .so, default this build's]
// The plugin argument measures another build of the plugin (e.g. one from before a change) in the
// same run conditions.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "mlpt/sandbox.h"
#include "sif_image.hpp"

extern char** environ;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void spawn_true() {
  pid_t pid;
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) == 0) waitpid(pid, nullptr, 0);
}

// Bare bubblewrap: /bin/true with `root` (the image's tree) as / and the image's binds read-only,
// in a user namespace of its own; no plugin, no cgroup, no state. False when bwrap cannot run here.
bool bwrap_true(const std::string& root) {
  std::vector<std::string> args = {"bwrap", "--unshare-user", "--bind", root, "/", "--dev", "/dev", "--proc", "/proc"};
  for (const char* b : {"/usr", "/bin", "/sbin", "/lib"}) args.insert(args.end(), {"--ro-bind", b, b});
  args.insert(args.end(), {"--ro-bind-try", "/lib64", "/lib64", "/bin/true"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int status = 0;
  if (posix_spawnp(&pid, "bwrap", nullptr, nullptr, argv.data(), environ) != 0) return false;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Api {
  mlpt::plugin::Component comp;
  const mlpt_sandbox_api* api;
  mlpt_sandbox_runtime* rt;
};

mlpt_sandbox* create(const Api& a, const std::string& image) {
  mlpt_sandbox_create_args c{MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE, a.rt, {image.data(), image.size()}, 0, 0, nullptr};
  mlpt::plugin::check(a.comp, a.api->create(&c), "create");
  return c.sandbox;
}
void exec_true(const Api& a, mlpt_sandbox* s) {
  mlpt_sandbox_exec_args e{};
  e.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
  e.sandbox = s;
  e.command = {"true", 4};
  e.timeout_ms = 30000;
  mlpt::plugin::check(a.comp, a.api->exec(&e), "exec");
  if (e.out_exit_code != 0) throw std::runtime_error("`true` failed in the sandbox");
}

}  // namespace

int main(int argc, char** argv) {
  int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  fs::path dir = fs::temp_directory_path() / ("mlpt-sbbench-" + std::to_string(getpid()));
  fs::create_directories(dir / "root/testbed");
  fs::create_directories(dir / "root/.mlpt");
  std::ofstream(dir / "root/testbed/x") << "x\n";
  std::ofstream(dir / "root/.mlpt/binds.json") << R"({"binds": ["/usr", "/bin", "/sbin", "/lib", {"host": "/lib64", "optional": true}]})";
  std::string image = (dir / "bench.sif").string();
  mlpt::sif::build_sif(dir / "root", image);

  mlpt::plugin::HostServices host;
  std::string so = argc > 2 ? argv[2] : std::string(MLPT_PLUGIN_DIR) + "/libmlpt_sandbox_apptainer.so";
  std::printf("plugin: %s\n", so.c_str());
  auto plugin = mlpt::plugin::Plugin::load(so, host);
  Api a{plugin->component(MLPT_COMPONENT_SANDBOX, "apptainer"), nullptr, nullptr};
  a.api = a.comp.table<mlpt_sandbox_api>();
  std::string cfg = R"({"runtime": "bwrap"})";
  mlpt_sandbox_runtime_create_args rc{MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE, {cfg.data(), cfg.size()}, nullptr, {}};
  mlpt::plugin::check(a.comp, a.api->runtime_create(&rc), "runtime_create");
  a.rt = rc.runtime;

  // Baselines: fork+exec /bin/true; bare bwrap on the same image's tree.
  int base_n = iters * 10;
  auto t0 = Clock::now();
  for (int i = 0; i < base_n; ++i) spawn_true();
  double base = secs(t0, Clock::now()) / base_n;
  const std::string root = (dir / "root").string();
  bool bare_ok = bwrap_true(root);  // warm up, and find out whether bwrap runs here at all
  auto b0 = Clock::now();
  for (int i = 0; bare_ok && i < iters; ++i) bare_ok = bwrap_true(root);
  const double bare = bare_ok ? secs(b0, Clock::now()) / iters : 0;

  // Warm the image mount, then one sandbox at a time, phase by phase.
  { auto* s = create(a, image); exec_true(a, s); a.api->destroy(s); }
  double tc = 0, te = 0, td = 0;
  for (int i = 0; i < iters; ++i) {
    auto c0 = Clock::now();
    auto* s = create(a, image);
    auto c1 = Clock::now();
    exec_true(a, s);
    auto c2 = Clock::now();
    a.api->destroy(s);
    auto c3 = Clock::now();
    tc += secs(c0, c1), te += secs(c1, c2), td += secs(c2, c3);
  }
  tc /= iters, te /= iters, td /= iters;
  std::printf("baseline host fork+exec /bin/true (mean of %d): %.1f us\n", base_n, base * 1e6);
  if (bare > 0)
    std::printf("baseline bare bwrap /bin/true on the same image's tree, same read-only binds, own user namespace (mean of %d): "
                "%.2f ms\n\n",
                iters, bare * 1e3);
  else
    std::printf("baseline bare bwrap: cannot run here (bwrap missing or user namespaces refused); not measured\n\n");
  char bare_ratio[32];
  auto vs_bare = [&](double t) {
    if (bare > 0) std::snprintf(bare_ratio, sizeof(bare_ratio), "%.2f", t / bare);
    else std::snprintf(bare_ratio, sizeof(bare_ratio), "-");
    return bare_ratio;
  };
  std::printf("%-28s %12s %12s %14s\n", "phase (one sandbox, mean)", "time", "x bare bwrap", "x host fork");
  std::printf("%-28s %10.2f ms %12s %14.1f\n", "create", tc * 1e3, vs_bare(tc), tc / base);
  std::printf("%-28s %10.2f ms %12s %14.1f\n", "exec true", te * 1e3, vs_bare(te), te / base);
  std::printf("%-28s %10.2f ms %12s %14.1f\n", "destroy", td * 1e3, vs_bare(td), td / base);
  std::printf("%-28s %10.2f ms %12s %14.1f\n\n", "create+exec+destroy", (tc + te + td) * 1e3, vs_bare(tc + te + td),
              (tc + te + td) / base);

  std::printf("%-4s %16s %16s %18s\n", "N", "sandboxes/s", "host true/s", "sandbox/host ratio");
  for (int n : {1, 4, 16}) {
    std::vector<std::thread> th;
    auto s0 = Clock::now();
    for (int k = 0; k < n; ++k)
      th.emplace_back([&] {
        for (int i = 0; i < iters; ++i) {
          auto* s = create(a, image);
          exec_true(a, s);
          a.api->destroy(s);
        }
      });
    for (auto& t : th) t.join();
    double sb_rate = n * iters / secs(s0, Clock::now());
    th.clear();
    auto h0 = Clock::now();
    for (int k = 0; k < n; ++k)
      th.emplace_back([&] {
        for (int i = 0; i < iters * 10; ++i) spawn_true();
      });
    for (auto& t : th) t.join();
    double host_rate = n * iters * 10 / secs(h0, Clock::now());
    std::printf("%-4d %16.1f %16.1f %18.4f\n", n, sb_rate, host_rate, sb_rate / host_rate);
  }
  a.api->runtime_destroy(a.rt);
  fs::remove_all(dir);
  return 0;
}
