// bench_transport: GB/s of the UCX weight transport between two processes on this machine, for one
// weight set (default 1 GiB: 64 tensors of 16 MiB) in 1, 4, 16 and 64 MiB buckets, against two
// baselines measured in the same run on the same machine:
//   - memcpy of the same bytes into a pre-faulted buffer (what one copy costs here), and
//   - ucx_perftest -t tag_bw with the bucket size as message size (UCX's own best for the data path
//     the transport uses: tagged rendezvous messages, CMA/shared memory between processes).
// A transport time is one whole send(): metadata, every bucket, commit and the receiver's ack.
//
// With --sparse-fraction F it also times a sparse refit of the same bytes read as BF16 weights of
// which a fraction F changed (core/refit/sparse_delta.hpp; bench_refit measures F on the ~100M
// model): encode, send the updates, apply them, against the dense send and ucx_perftest.
//
//   bench_transport [--mib N] [--reps N] [--buckets 1,4,16,64] [--no-perftest] [--sparse-fraction F]
// The receiving process is this executable started with --receiver (internal).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "core/refit/sparse_delta.hpp"
#include "mlpt/transport.h"
#include "ucx_perftest.hpp"

extern char** environ;

namespace {

using bench_ucx::perftest_gbps;
using bench_ucx::spawn;
using bench_ucx::wait_exit;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using bench_ucx::Transport;

// ---- the receiving process ----
int run_receiver(const std::string& config, int count) {
  Transport t;
  mlpt_transport* rx = t.create(MLPT_TRANSPORT_RECEIVER, config);
  uint64_t next = 1;
  for (int i = 0; i < count; ++i) {
    mlpt_transport_receive_args a{};
    a.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
    a.transport = rx;
    a.min_version = next;
    a.timeout_ms = 60000;
    mlpt::plugin::check(t.component, t.api->receive(&a), "receive");
    mlpt_transport_release_args r{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, rx, a.out_version, nullptr};
    mlpt::plugin::check(t.component, t.api->release(&r), "release");
    next = a.out_version + 1;
  }
  t.api->destroy(rx);
  return 0;
}

// ---- measurements ----
struct Weights {
  std::vector<std::string> names;
  std::vector<int64_t> shape;
  std::vector<uint8_t*> data;
  std::vector<mlpt_named_tensor> views;
  size_t tensor_bytes, total;
  Weights(size_t count, size_t bytes) : tensor_bytes(bytes), total(count * bytes) {
    shape = {static_cast<int64_t>(bytes / 4)};
    for (size_t i = 0; i < count; ++i) {
      names.push_back("model.layers." + std::to_string(i) + ".weight");
      auto* p = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      for (size_t k = 0; k < bytes; k += 4096) p[k] = static_cast<uint8_t>(i + k);
      data.push_back(p);
    }
    for (size_t i = 0; i < count; ++i) {
      mlpt_named_tensor v{};
      v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      v.name = {names[i].data(), names[i].size()};
      v.tensor.data = data[i];
      v.tensor.device = {kDLCPU, 0};
      v.tensor.ndim = 1;
      v.tensor.dtype = {kDLFloat, 32, 1};
      v.tensor.shape = shape.data();
      views.push_back(v);
    }
  }
  ~Weights() {
    for (auto* p : data) munmap(p, tensor_bytes);
  }
};

// The median of `times` (seconds) as GB/s of `total` bytes.
double median_gbps_of(std::vector<double> times, size_t total) {
  std::sort(times.begin(), times.end());
  return total / times[times.size() / 2] / 1e9;
}

// memcpy of the weights, the median of `reps` copies after one warm-up (the transport's statistic).
double memcpy_gbps(const Weights& w, int reps) {
  auto* dst = static_cast<uint8_t*>(mmap(nullptr, w.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  std::memset(dst, 0, w.total);  // pre-fault, as the transport's receive buffers are after warm-up
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = Clock::now();
    for (size_t i = 0; i < w.data.size(); ++i) std::memcpy(dst + i * w.tensor_bytes, w.data[i], w.tensor_bytes);
    if (r > 0) times.push_back(seconds_since(t0));
  }
  munmap(dst, w.total);
  return median_gbps_of(times, w.total);
}

struct TransportResult {
  double best_gbps = 0, median_gbps = 0, worst_gbps = 0;
  bool ok = false;
  std::string error;
};

TransportResult transport_gbps(Transport& t, const std::string& self, const std::vector<mlpt_named_tensor>& views, size_t total,
                               size_t bucket, bool checksum, int reps) {
  constexpr int kWarmup = 3;  // connect, and fault in the receiver's recycled buffers
  TransportResult out;
  int port = free_port();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  std::string sender_config = R"({"address": ")" + addr + R"(", "bucket_bytes": )" + std::to_string(bucket) +
                              R"(, "verify_checksum": )" + (checksum ? "true" : "false") + "}";
  std::string receiver_config = R"({"address": ")" + addr + R"(", "name": "bench-receiver", "verify_checksum": )" +
                                (checksum ? "true" : "false") + "}";
  mlpt_transport* tx = t.create(MLPT_TRANSPORT_SENDER, sender_config);
  pid_t child = spawn({self, "--receiver", receiver_config, std::to_string(kWarmup + reps)});
  std::vector<double> times;
  try {
    for (int v = 1; v <= kWarmup + reps; ++v) {
      mlpt_transport_send_args a{MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE, tx, static_cast<uint64_t>(v), views.data(), views.size(), 60000};
      auto t0 = Clock::now();
      mlpt::plugin::check(t.component, t.api->send(&a), "send");
      if (v > kWarmup) times.push_back(seconds_since(t0));
    }
    std::sort(times.begin(), times.end());
    out.best_gbps = total / times.front() / 1e9;
    out.median_gbps = median_gbps_of(times, total);
    out.worst_gbps = total / times.back() / 1e9;
    out.ok = true;
  } catch (const std::exception& e) {
    out.error = e.what();
    kill(child, SIGKILL);
  }
  wait_exit(child);
  t.api->destroy(tx);
  return out;
}

// A sparse refit of `w` read as BF16 weights of which `fraction` changed (evenly spread): encode
// per tensor, send the updates through the transport, apply them; the dense send of the same
// weights and ucx_perftest at the same total are the baselines.
void sparse_refit(Transport& t, const std::string& self, const Weights& w, double fraction, int reps, bool perftest) {
  const size_t bucket = 16 << 20;
  const int64_t n = static_cast<int64_t>(w.tensor_bytes / 2);
  const int64_t stride = fraction > 0 ? std::max<int64_t>(1, static_cast<int64_t>(std::llround(1 / fraction))) : n + 1;
  std::vector<std::vector<std::byte>> blobs(w.data.size());
  std::vector<std::vector<uint16_t>> engine(w.data.size());
  size_t wire = 0;
  for (size_t i = 0; i < w.data.size(); ++i) {
    const auto* next = reinterpret_cast<const uint16_t*>(w.data[i]);
    engine[i].assign(next, next + n);  // the engine's previous copy: `next` with the changes undone
    for (int64_t k = static_cast<int64_t>(i) % stride; k < n; k += stride) engine[i][k] ^= 0x0001;
  }
  auto t0 = Clock::now();
  for (size_t i = 0; i < w.data.size(); ++i)
    wire += mlpt::refit::encode_bf16_delta(engine[i].data(), reinterpret_cast<const uint16_t*>(w.data[i]), n, blobs[i]).bytes;
  const double encode = seconds_since(t0);
  std::vector<int64_t> shapes(blobs.size());
  std::vector<mlpt_named_tensor> views = w.views;
  for (size_t i = 0; i < blobs.size(); ++i) {
    shapes[i] = static_cast<int64_t>(blobs[i].size());
    views[i].tensor.data = blobs[i].data();
    views[i].tensor.dtype = {kDLUInt, 8, 1};
    views[i].tensor.shape = &shapes[i];
  }
  TransportResult dense = transport_gbps(t, self, w.views, w.total, bucket, false, reps);
  TransportResult sparse = transport_gbps(t, self, views, wire, bucket, false, reps);
  auto ta = Clock::now();
  for (size_t i = 0; i < blobs.size(); ++i)
    mlpt::refit::apply_bf16_delta(blobs[i].data(), blobs[i].size(), engine[i].data(), n, w.names[i]);
  const double apply = seconds_since(ta);
  bool exact = true;
  for (size_t i = 0; i < blobs.size(); ++i) exact = exact && std::memcmp(engine[i].data(), w.data[i], w.tensor_bytes) == 0;
  const double pt = perftest ? perftest_gbps(bucket, w.total, false).value_or(0) : 0;
  if (!dense.ok || !sparse.ok) {
    std::printf("\nsparse refit: failed: %s\n", (dense.ok ? sparse.error : dense.error).c_str());
    return;
  }
  const double dense_s = w.total / (dense.median_gbps * 1e9), sparse_s = wire / (sparse.median_gbps * 1e9);
  std::printf("\nsparse refit, %.4g of the BF16 elements changed: %.2f MiB on the wire for %.2f MiB dense (%.4f)\n", fraction,
              wire / 1048576.0, w.total / 1048576.0, static_cast<double>(wire) / static_cast<double>(w.total));
  std::printf("  (sends: medians of %d)\n  dense send %.4f s; sparse encode %.4f s + send %.4f s + apply %.4f s = %.4f s (%.3f of dense); engine copy %s\n",
              reps, dense_s, encode, sparse_s, apply, encode + sparse_s + apply, (encode + sparse_s + apply) / dense_s,
              exact ? "bit-exact" : "DIFFERS");
  if (pt > 0)
    std::printf("  ucx_perftest tag_bw for the dense bytes: %.4f s; sparse refit / that: %.3f\n", w.total / (pt * 1e9),
                (encode + sparse_s + apply) / (w.total / (pt * 1e9)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--receiver") {
    try {
      return run_receiver(argv[2], std::stoi(argv[3]));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench receiver: %s\n", e.what());
      return 2;
    }
  }
  size_t mib = 1024;
  int reps = 5;
  bool perftest = true;
  double sparse_fraction = -1;
  std::vector<size_t> buckets_mib = {1, 4, 16, 64};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::stoul(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--buckets" && i + 1 < argc) {
      buckets_mib.clear();
      std::stringstream s(argv[++i]);
      for (std::string x; std::getline(s, x, ',');) buckets_mib.push_back(std::stoul(x));
    } else if (a == "--no-perftest") {
      perftest = false;
    } else if (a == "--sparse-fraction" && i + 1 < argc) {
      sparse_fraction = std::stod(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--mib N] [--reps N] [--buckets 1,4,16,64] [--no-perftest] [--sparse-fraction F]\n", argv[0]);
      return 64;
    }
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  size_t tensor_bytes = std::min<size_t>(16, mib) << 20;
  Weights w(std::max<size_t>(1, (mib << 20) / tensor_bytes), tensor_bytes);
  std::printf("bench_transport: %zu tensors x %zu MiB = %.2f GB, %d timed sends per row after 3 warm-up sends\n",
              w.data.size(), tensor_bytes >> 20, w.total / 1e9, reps);
  std::printf("UCX_TLS=%s (unset: UCX chooses; the same environment is used by ucx_perftest)\n",
              std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "unset");
  double memcpy_rate = memcpy_gbps(w, reps);
  Transport t;
  // Every figure is a median with its spread (lowest-highest): the transport's of `reps` sends,
  // ucx_perftest's of 3 runs (its "overall" bandwidth each), memcpy's of `reps` copies.
  std::printf("\n%-8s %-9s %22s %22s %7s %22s %7s %9s\n", "bucket", "checksum", "mlpt median (spread)", "perftest -e (spread)",
              "vs -e", "perftest (spread)", "vs it", "vs memcpy");
  std::printf("%-8s %-9s %22s %22s %7s %22s %7s %9s\n", "", "", "GB/s", "GB/s", "", "GB/s", "", "");
  struct Row {
    size_t mib;
    bool checksum;
  };
  std::vector<Row> rows;
  for (size_t b : buckets_mib) rows.push_back({b, false});
  rows.push_back({16, true});
  int flagged = 0;
  auto spread = [](double median, double low, double high) {
    char text[48];
    std::snprintf(text, sizeof(text), "%.2f (%.2f-%.2f)", median, low, high);
    return std::string(text);
  };
  // A ratio above `bound` cannot be what it claims (the baseline is no ceiling here, or the
  // measurement is off): flagged with a mark, explained below the table, never printed bare.
  auto ratio = [&](double value, double base, double bound) {
    char text[32] = "-";
    if (base <= 0) return std::string(text);
    std::snprintf(text, sizeof(text), "%.0f%%%s", 100 * value / base, value / base > bound ? "!" : "");
    if (value / base > bound) ++flagged;
    return std::string(text);
  };
  for (const Row& row : rows) {
    size_t bucket = row.mib << 20;
    TransportResult r = transport_gbps(t, self, w.views, w.total, bucket, row.checksum, reps);
    // Not measured (median 0): checksum rows, or ucx_perftest failed.
    const auto pe = perftest && !row.checksum ? bench_ucx::perftest_median(bucket, w.total, true, 3) : bench_ucx::PerftestRate{};
    const auto pt = perftest && !row.checksum ? bench_ucx::perftest_median(bucket, w.total, false, 3) : bench_ucx::PerftestRate{};
    if (!r.ok) {
      std::printf("%4zu MiB %-9s failed: %s\n", row.mib, row.checksum ? "xxh64" : "off", r.error.c_str());
      continue;
    }
    const std::string pes = pe.median > 0 ? spread(pe.median, pe.low, pe.high) : "-";
    const std::string pts = pt.median > 0 ? spread(pt.median, pt.low, pt.high) : "-";
    std::printf("%4zu MiB %-9s %22s %22s %7s %22s %7s %9s\n", row.mib, row.checksum ? "xxh64" : "off",
                spread(r.median_gbps, r.worst_gbps, r.best_gbps).c_str(), pes.c_str(), ratio(r.median_gbps, pe.median, 1.0).c_str(),
                pts.c_str(), ratio(r.median_gbps, pt.median, 1.0).c_str(), ratio(r.median_gbps, memcpy_rate, 1.0).c_str());
    std::fflush(stdout);
  }
  if (flagged > 0)
    std::printf("\n!: the transport's median exceeds that baseline, which bounds it (ucx_perftest in the same error mode moves the\n"
                "   same messages with nothing else to do; a copy between processes costs at least one memcpy): the baseline is\n"
                "   not a ceiling in this run (see its spread: a loaded machine, or UCX chose another data path), so the ratio\n"
                "   says nothing about the transport's efficiency\n");
  if (sparse_fraction >= 0) sparse_refit(t, self, w, sparse_fraction, reps, perftest);
  std::printf("\nmemcpy of the same %.2f GB (one thread, pre-faulted destination, median of %d): %.2f GB/s\n", w.total / 1e9, reps,
              memcpy_rate);
  std::printf("goal: the transport within 80%% of ucx_perftest tag_bw at the same message size and error-handling mode\n"
              "(the transport must notice receivers that die midway, so its endpoints use UCP_ERR_HANDLING_MODE_PEER)\n");
  return 0;
}
