// What the UCX benchmarks share: the transport loaded as mlpt loads it, processes on loopback (a
// free port, spawning and reaping children) and ucx_perftest's tag_bw bandwidth as the same-run
// baseline (the data path the transport uses: tagged rendezvous messages between processes), with
// the check that tells when perftest's one buffer stays in cache.
// MLPT_PLUGIN_DIR is the built plugins' folder.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "mlpt/transport.h"
#include "tests/support/loopback_port.hpp"

extern char** environ;

namespace bench_ucx {

// The UCX transport plugin, loaded through the core loader with a host of its own.
struct Transport {
  mlpt::plugin::HostServices host;
  std::shared_ptr<mlpt::plugin::Plugin> plugin;
  mlpt::plugin::Component component;
  const mlpt_transport_api* api;
  Transport() {
    plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_transport_ucx.so", host);
    component = plugin->component(MLPT_COMPONENT_TRANSPORT, "ucx");
    api = component.table<mlpt_transport_api>();
  }
  // `ranks`: the sender group this endpoint is one rank of (NULL: a group of one).
  mlpt_transport* create(mlpt_transport_role role, const std::string& config,
                         const mlpt_component_group* ranks = nullptr) {
    mlpt_transport_create_args a{};
    a.struct_size = MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE;
    a.config_json = {config.data(), config.size()};
    a.role = role;
    a.group = {"bench", 5};
    a.component_group = ranks;
    mlpt::plugin::check(component, api->create(&a), "create");
    return a.transport;
  }
};

inline pid_t spawn(const std::vector<std::string>& argv, const char* out_path = nullptr) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_path) {
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

inline int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// ucx_perftest tag_bw, server and client on loopback; returns GB/s (10^9) or nothing. With
// `error_handling` (-e) its endpoints detect dead peers, as the transport's connection endpoints
// do: in UCX 1.13 that mode leaves out CMA and shared memory, so it is the baseline of a stream over
// the connection; without it, of a stream over a receiver's own endpoint (no peer error handling,
// the transport's path to a receiver on this machine). Both read UCX_TLS from the environment.
// Its arguments (but the port): messages of `bucket` bytes, three times `total` of them after a
// quarter as many warm-up messages; -e with `error_handling`.
inline std::vector<std::string> perftest_args(size_t bucket, size_t total, bool error_handling) {
  size_t iters = std::max<size_t>(16, 3 * total / bucket);
  std::vector<std::string> args = {"-t", "tag_bw",
                                   "-s", std::to_string(bucket),
                                   "-n", std::to_string(iters),
                                   "-w", std::to_string(std::max<size_t>(4, iters / 4)),
                                   "-f"};
  if (error_handling) args.push_back("-e");
  return args;
}

// How ucx_perftest allocates its buffers (UCX_ALLOC_PRIO): nullptr for UCX's default, which on this
// UCX puts them in SysV shared memory (md:sysv first), on 4 KiB pages unless shmem THP is enabled;
// "thp" for anonymous memory on transparent huge pages, "mmap" for anonymous memory on 4 KiB pages
// (what a trainer's weights are unless it asks for huge pages). A baseline is like for like only
// with the transport's weights on the same kind of memory.
inline std::string perftest_env(const char* alloc_prio) {
  return alloc_prio ? std::string("UCX_ALLOC_PRIO=") + alloc_prio + " " : std::string();
}

// The baseline as a command line, to name it exactly where it is printed.
inline std::string perftest_command(size_t bucket, size_t total, bool error_handling,
                                    const char* alloc_prio = nullptr) {
  std::string out = perftest_env(alloc_prio) + "ucx_perftest";
  for (const std::string& a : perftest_args(bucket, total, error_handling)) out += " " + a;
  return out;
}

inline std::optional<double> perftest_gbps(size_t bucket, size_t total, bool error_handling,
                                           const char* alloc_prio = nullptr) {
  // Both perftest processes inherit it; the caller's own UCX_ALLOC_PRIO comes back afterwards.
  const char* saved = std::getenv("UCX_ALLOC_PRIO");
  const std::string restore = saved ? saved : "";
  if (alloc_prio) setenv("UCX_ALLOC_PRIO", alloc_prio, 1);
  struct Restore {
    bool set, had;
    std::string value;
    ~Restore() {
      if (!set) return;
      if (had)
        setenv("UCX_ALLOC_PRIO", value.c_str(), 1);
      else
        unsetenv("UCX_ALLOC_PRIO");
    }
  } restore_env{alloc_prio != nullptr, saved != nullptr, restore};
  int port = free_port();
  std::vector<std::string> args = perftest_args(bucket, total, error_handling);
  args.insert(args.end(), {"-p", std::to_string(port)});
  std::vector<std::string> server = {"ucx_perftest"}, client = {"ucx_perftest", "127.0.0.1"};
  server.insert(server.end(), args.begin(), args.end());
  client.insert(client.end(), args.begin(), args.end());
  auto dir = std::filesystem::temp_directory_path();
  std::string out_path = (dir / ("mlpt_bench_perftest_" + std::to_string(getpid()) + ".txt")).string();
  pid_t s = spawn(server, "/dev/null");
  if (s < 0) return std::nullopt;
  std::optional<double> result;
  for (int attempt = 0; attempt < 20 && !result; ++attempt) {  // the server needs a moment to listen
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pid_t c = spawn(client, out_path.c_str());
    if (c < 0 || wait_exit(c) != 0) continue;
    // -f prints one line: iterations, latency 50%, avg, overall (usec), bandwidth avg, overall (MB/s,
    // where UCX's MB is 2^20 bytes), message rate avg, overall.
    FILE* f = std::fopen(out_path.c_str(), "r");
    char line[1024];
    while (f && std::fgets(line, sizeof(line), f)) {
      std::istringstream in(line);
      double n, p50, avg, overall, bw_avg, bw_overall;
      if (in >> n >> p50 >> avg >> overall >> bw_avg >> bw_overall) result = bw_overall * 1048576.0 / 1e9;
    }
    if (f) std::fclose(f);
  }
  kill(s, SIGKILL);
  wait_exit(s);
  std::filesystem::remove(out_path);
  return result;
}

// ucx_perftest run `runs` times: the median of its overall bandwidths, and their spread, so that a
// transport's median is compared with the same statistic. Empty when no run succeeded.
struct PerftestRate {
  double median = 0, low = 0, high = 0;
  int runs = 0;
};
inline PerftestRate perftest_median(size_t bucket, size_t total, bool error_handling, int runs,
                                    const char* alloc_prio = nullptr) {
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r)
    if (auto g = perftest_gbps(bucket, total, error_handling, alloc_prio)) rates.push_back(*g);
  PerftestRate out;
  if (rates.empty()) return out;
  std::sort(rates.begin(), rates.end());
  out.median = rates[rates.size() / 2], out.low = rates.front(), out.high = rates.back();
  out.runs = static_cast<int>(rates.size());
  return out;
}

// The median GB/s of `reps` runs of `copy(run)`, each moving `bytes`, after one warm-up run.
template <class Copy>
double median_copy_gbps(int reps, size_t bytes, Copy&& copy) {
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    copy(r);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// memcpy of one buffer of `bytes`, again and again (about 1 GB in all), in GB/s, the median of
// `reps`: what a copy costs when its working set is one message, as ucx_perftest's is (it sends
// every message from the same buffer).
inline double reused_memcpy_gbps(size_t bytes, int reps) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  const size_t rounds = std::max<size_t>(1, (size_t(1) << 30) / bytes);
  return median_copy_gbps(reps, rounds * bytes, [&](int) {
    for (size_t i = 0; i < rounds; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      src[i % bytes] = dst[(i * 7) % bytes];  // keeps the copies from being folded together
    }
  });
}

// memcpy through `total` bytes (a source and a pre-faulted destination of that size) in GB/s, the
// median of `reps`: a copy whose working set is a weight set of that size.
inline double streaming_memcpy_gbps(size_t total, int reps) {
  std::vector<uint8_t> src(total, 1), dst(total, 0);
  return median_copy_gbps(reps, total, [&](int r) {
    std::memcpy(dst.data(), src.data(), total);
    src[r % total] = dst[(r * 7) % total];  // keeps the copies from being folded together
  });
}

// ucx_perftest's rate at one message size is a cache-resident figure next to a weight set when a
// copy of one message runs above 1.25x a copy of the weight set: perftest then moves a buffer that
// stays in cache, where the transport moves every byte of the weights from memory.
inline bool perftest_in_cache(double reused_gbps, double weights_gbps) {
  return reused_gbps > 1.25 * weights_gbps;
}

}  // namespace bench_ucx
