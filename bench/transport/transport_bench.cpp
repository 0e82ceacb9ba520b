// bench_transport: GB/s of the UCX weight transport between two processes on this machine, for one
// weight set (default 1 GiB: 16 tensors of 64 MiB; tensors as large as the largest bucket, at least
// 16 MiB) in 1, 4, 16 and 64 MiB buckets, per transport class (UCX_TLS, set for both processes and
// for ucx_perftest):
//   - sm:  UCX_TLS=sm,tcp: shared memory and CMA carry the data, TCP the connection endpoint;
//   - tcp: UCX_TLS=tcp: everything over TCP loopback.
// Each row is measured against two baselines from the same run on the same machine:
//   - ucx_perftest -t tag_bw with the bucket size as message size, in the same class and error
//     mode as the endpoint that carries the transport's data: a receiver on this machine is
//     streamed over an endpoint without peer error handling (perftest without -e); the row
//     "peer-checked" streams over the connection endpoint, as across machines (perftest -e);
//   - memcpy of the same bytes into a pre-faulted buffer (what one copy costs here).
// A transport time is one whole send(): metadata, every bucket, commit and the receiver's ack.
//
// With --sparse-fraction F it also times a sparse refit of the same bytes read as BF16 weights of
// which a fraction F changed (plugins/transport_sparse/sparse_delta.hpp; bench_refit_steps measures F on the
// ~100M model): encode, send the updates, apply them, against the dense send and ucx_perftest.
//
//   bench_transport [--mib N] [--reps N] [--buckets 1,4,16,64] [--classes sm,tcp] [--small-pages]
//                   [--perftest-default-buffers] [--no-perftest] [--sparse-fraction F]
// ucx_perftest takes its buffers from the same kind of memory as the weights (UCX_ALLOC_PRIO=thp
// with huge pages, =mmap with --small-pages), printed with its command line;
// --perftest-default-buffers leaves UCX's default (SysV shared memory on 4 KiB pages here).
// The receiving process is this executable started with --receiver (internal).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
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
#include "mlpt/transport.h"
#include "sparse_delta.hpp"
#include "ucx_perftest.hpp"

extern char** environ;

namespace {

using bench_ucx::perftest_gbps;
using bench_ucx::spawn;
using bench_ucx::wait_exit;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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
    mlpt::plugin::check(t.component, t.api->release_received(&r), "release");
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
  // `huge_pages`: on transparent huge pages, as the transport's receive buffers are; else on 4 KiB
  // pages. Between processes the data moves by CMA: the kernel walks and copies the sender's pages
  // one by one, and from 4 KiB pages that copy runs at about half the rate here (for ucx_perftest
  // as for the transport: its baseline takes its buffers from the same kind of memory, below).
  Weights(size_t count, size_t bytes, bool huge_pages) : tensor_bytes(bytes), total(count * bytes) {
    shape = {static_cast<int64_t>(bytes / 4)};
    for (size_t i = 0; i < count; ++i) {
      names.push_back("model.layers." + std::to_string(i) + ".weight");
      auto* p = static_cast<uint8_t*>(
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (huge_pages) madvise(p, bytes, MADV_HUGEPAGE);
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
  auto* dst = static_cast<uint8_t*>(
      mmap(nullptr, w.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  std::memset(dst, 0, w.total);  // pre-fault, as the transport's receive buffers are after warm-up
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = Clock::now();
    for (size_t i = 0; i < w.data.size(); ++i)
      std::memcpy(dst + i * w.tensor_bytes, w.data[i], w.tensor_bytes);
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

// `stream_endpoint`: the receiver (on this machine) is streamed over an endpoint of its own without
// peer error handling (the transport's default); false: over the peer-checked connection.
TransportResult transport_gbps(Transport& t, const std::string& self,
                               const std::vector<mlpt_named_tensor>& views, size_t total, size_t bucket,
                               bool checksum, int reps, bool stream_endpoint = true) {
  constexpr int kWarmup = 3;  // connect, and fault in the receiver's recycled buffers
  TransportResult out;
  int port = free_port();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  std::string sender_config = R"({"address": ")" + addr + R"(", "bucket_bytes": )" + std::to_string(bucket) +
                              R"(, "verify_checksum": )" + (checksum ? "true" : "false") +
                              R"(, "shared_memory": )" + (stream_endpoint ? "true" : "false") + "}";
  std::string receiver_config = R"({"address": ")" + addr +
                                R"(", "name": "bench-receiver", "verify_checksum": )" +
                                (checksum ? "true" : "false") + "}";
  mlpt_transport* tx = t.create(MLPT_TRANSPORT_SENDER, sender_config);
  pid_t child = spawn({self, "--receiver", receiver_config, std::to_string(kWarmup + reps)});
  std::vector<double> times;
  try {
    for (int v = 1; v <= kWarmup + reps; ++v) {
      mlpt_transport_send_args a{MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE,
                                 tx,
                                 static_cast<uint64_t>(v),
                                 views.data(),
                                 views.size(),
                                 60000};
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
void sparse_refit(Transport& t, const std::string& self, const Weights& w, double fraction, int reps,
                  bool perftest, const char* perftest_alloc) {
  const size_t bucket = 16 << 20;
  const int64_t n = static_cast<int64_t>(w.tensor_bytes / 2);
  const int64_t stride =
      fraction > 0 ? std::max<int64_t>(1, static_cast<int64_t>(std::llround(1 / fraction))) : n + 1;
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
    wire += mlpt::sparse_refit::encode_bf16_delta(engine[i].data(),
                                                  reinterpret_cast<const uint16_t*>(w.data[i]), n, blobs[i])
                .bytes;
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
    mlpt::sparse_refit::apply_bf16_delta(blobs[i].data(), blobs[i].size(), engine[i].data(), n, w.names[i]);
  const double apply = seconds_since(ta);
  bool exact = true;
  for (size_t i = 0; i < blobs.size(); ++i)
    exact = exact && std::memcmp(engine[i].data(), w.data[i], w.tensor_bytes) == 0;
  const double pt = perftest ? perftest_gbps(bucket, w.total, false, perftest_alloc).value_or(0) : 0;
  if (!dense.ok || !sparse.ok) {
    std::printf("\nsparse refit: failed: %s\n", (dense.ok ? sparse.error : dense.error).c_str());
    return;
  }
  const double dense_s = w.total / (dense.median_gbps * 1e9), sparse_s = wire / (sparse.median_gbps * 1e9);
  std::printf(
      "\nsparse refit, %.4g of the BF16 elements changed: %.2f MiB on the wire for %.2f MiB dense (%.4f)\n",
      fraction, wire / 1048576.0, w.total / 1048576.0,
      static_cast<double>(wire) / static_cast<double>(w.total));
  std::printf(
      "  (sends: medians of %d)\n  dense send %.4f s; sparse encode %.4f s + send %.4f s + apply %.4f s = "
      "%.4f s (%.3f of dense); engine copy %s\n",
      reps, dense_s, encode, sparse_s, apply, encode + sparse_s + apply,
      (encode + sparse_s + apply) / dense_s, exact ? "bit-exact" : "DIFFERS");
  if (pt > 0)
    std::printf("  ucx_perftest tag_bw for the dense bytes: %.4f s; sparse refit / that: %.3f\n",
                w.total / (pt * 1e9), (encode + sparse_s + apply) / (w.total / (pt * 1e9)));
}

}  // namespace

// UCX_TLS of a transport class: both processes and ucx_perftest read it from the environment.
const char* class_tls(const std::string& name) {
  if (name == "sm") return "sm,tcp";  // the connection endpoint needs TCP: peer error handling has no sm
  if (name == "tcp") return "tcp";
  return nullptr;
}

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
  bool huge_pages = true;
  bool default_perftest_buffers = false;
  double sparse_fraction = -1;
  std::vector<size_t> buckets_mib = {1, 4, 16, 64};
  std::vector<std::string> classes = {"sm", "tcp"};
  auto split = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string x; std::getline(in, x, ',');) out.push_back(x);
    return out;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::stoul(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--buckets" && i + 1 < argc) {
      buckets_mib.clear();
      for (const std::string& x : split(argv[++i])) buckets_mib.push_back(std::stoul(x));
    } else if (a == "--classes" && i + 1 < argc) {
      classes = split(argv[++i]);
      for (const std::string& c : classes)
        if (!class_tls(c)) {
          std::fprintf(stderr, "--classes: unknown class '%s' (sm, tcp)\n", c.c_str());
          return 64;
        }
    } else if (a == "--small-pages") {
      huge_pages = false;
    } else if (a == "--perftest-default-buffers") {
      default_perftest_buffers = true;
    } else if (a == "--no-perftest") {
      perftest = false;
    } else if (a == "--sparse-fraction" && i + 1 < argc) {
      sparse_fraction = std::stod(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--mib N] [--reps N] [--buckets 1,4,16,64] [--classes sm,tcp] [--small-pages] "
                   "[--perftest-default-buffers] [--no-perftest] [--sparse-fraction F]\n",
                   argv[0]);
      return 64;
    }
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // ucx_perftest's buffers on the same kind of memory as the weights (its default, SysV shared
  // memory, is neither: --perftest-default-buffers measures against that instead).
  const char* perftest_alloc = default_perftest_buffers ? nullptr : huge_pages ? "thp" : "mmap";
  // Tensors at least as large as the largest bucket: a bucket is a slice of one tensor (or several
  // small ones packed), so with smaller tensors a larger bucket setting would send messages of the
  // tensor's size, not of the bucket's, against perftest at the bucket's.
  const size_t largest = *std::max_element(buckets_mib.begin(), buckets_mib.end());
  size_t tensor_bytes = std::min<size_t>(std::max<size_t>(16, largest), mib) << 20;
  Weights w(std::max<size_t>(1, (mib << 20) / tensor_bytes), tensor_bytes, huge_pages);
  std::printf(
      "bench_transport: %zu tensors x %zu MiB = %.2f GB on %s, %d timed sends per row after 3 warm-up "
      "sends\n",
      w.data.size(), tensor_bytes >> 20, w.total / 1e9,
      huge_pages ? "transparent huge pages (--small-pages: 4 KiB)" : "4 KiB pages", reps);
  double memcpy_rate = memcpy_gbps(w, reps);
  Transport t;
  // Every figure is a median with its spread (lowest-highest): the transport's of `reps` sends,
  // ucx_perftest's of 3 runs (its "overall" bandwidth each), memcpy's of `reps` copies.
  std::printf("\n%-6s %-8s %-9s %-13s %22s %22s %7s %9s\n", "class", "bucket", "checksum", "data endpoint",
              "mlpt median (spread)", "perftest (spread)", "vs it", "vs memcpy");
  std::printf("%-6s %-8s %-9s %-13s %22s %22s %7s %9s\n", "", "", "", "", "GB/s", "GB/s", "", "");
  struct Row {
    std::string cls;
    size_t mib;
    bool checksum;
    bool stream_endpoint;  // false: streamed over the peer-checked connection (perftest -e)
  };
  std::vector<Row> rows;
  for (const std::string& c : classes) {
    for (size_t b : buckets_mib) rows.push_back({c, b, false, true});
    rows.push_back({c, 16, false, false});
    rows.push_back({c, 16, true, true});
  }
  int flagged = 0, cached = 0;
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
  std::string shown_class;
  for (const Row& row : rows) {
    setenv("UCX_TLS", class_tls(row.cls), 1);
    if (row.cls != shown_class) std::printf("-- %s: UCX_TLS=%s\n", row.cls.c_str(), class_tls(row.cls));
    shown_class = row.cls;
    size_t bucket = row.mib << 20;
    TransportResult r =
        transport_gbps(t, self, w.views, w.total, bucket, row.checksum, reps, row.stream_endpoint);
    // Not measured (median 0): checksum rows, or ucx_perftest failed.
    const auto pt = perftest && !row.checksum
                        ? bench_ucx::perftest_median(bucket, w.total, !row.stream_endpoint, 3, perftest_alloc)
                        : bench_ucx::PerftestRate{};
    const char* endpoint = row.stream_endpoint ? "own (no -e)" : "peer-checked";
    if (!r.ok) {
      std::printf("%-6s %4zu MiB %-9s %-13s failed: %s\n", row.cls.c_str(), row.mib,
                  row.checksum ? "xxh64" : "off", endpoint, r.error.c_str());
      continue;
    }
    // perftest sends every message from one buffer: where a copy of one message runs well above a
    // copy of the weights (more than 1.25x), its figure is a cache-resident one and its ratio marked
    // "c": the transport moves the weights themselves, from memory, so the ratio understates it.
    // Both copies measured now, under the same load (the machine is shared).
    const double reused = pt.median > 0 ? bench_ucx::reused_memcpy_gbps(bucket, reps) : 0;
    const bool in_cache = pt.median > 0 && bench_ucx::perftest_in_cache(reused, memcpy_gbps(w, reps));
    cached += in_cache ? 1 : 0;
    const std::string pts = pt.median > 0 ? spread(pt.median, pt.low, pt.high) +
                                                (row.stream_endpoint ? "" : " -e") + (in_cache ? " c" : "")
                                          : "-";
    std::printf("%-6s %4zu MiB %-9s %-13s %22s %22s %7s %9s\n", row.cls.c_str(), row.mib,
                row.checksum ? "xxh64" : "off", endpoint,
                spread(r.median_gbps, r.worst_gbps, r.best_gbps).c_str(), pts.c_str(),
                (ratio(r.median_gbps, pt.median, 1.0) + (in_cache ? "c" : "")).c_str(),
                ratio(r.median_gbps, memcpy_rate, 1.0).c_str());
    if (pt.median > 0)
      std::printf("%-6s %8s baseline: UCX_TLS=%s %s, server and client on 127.0.0.1, overall GB/s, %d runs\n",
                  "", "", class_tls(row.cls),
                  bench_ucx::perftest_command(bucket, w.total, !row.stream_endpoint, perftest_alloc).c_str(),
                  pt.runs);
    if (in_cache)
      std::printf("%-6s %8s copy of one %zu MiB message again and again: %.2f GB/s\n", "", "", row.mib,
                  reused);
    std::fflush(stdout);
  }
  if (flagged > 0)
    std::printf(
        "\n!: the transport's median exceeds that baseline, which bounds it (ucx_perftest in the same class "
        "and error mode\n"
        "   moves the same messages with nothing else to do; a copy between processes costs at least one "
        "memcpy): the\n"
        "   baseline is not a ceiling in this run (see its spread: a loaded machine, or UCX chose another "
        "data path), so\n"
        "   the ratio says nothing about the transport's efficiency\n");
  if (cached > 0)
    std::printf(
        "\nc: ucx_perftest sends every message from one buffer of that size, which stays in cache on this "
        "machine (a copy\n"
        "   of one message, at the rate printed below its row, runs over 1.25x a copy of the weights "
        "measured with it):\n"
        "   not a memory figure. The transport sends the weights themselves, each byte from memory, so "
        "that baseline\n"
        "   has an advantage the transport lacks: the ratio marked c understates the transport\n");
  if (sparse_fraction >= 0) {
    setenv("UCX_TLS", class_tls(classes.front()), 1);
    sparse_refit(t, self, w, sparse_fraction, reps, perftest, perftest_alloc);
  }
  std::printf("\nmemcpy of the same %.2f GB (one thread, pre-faulted destination, median of %d): %.2f GB/s\n",
              w.total / 1e9, reps, memcpy_rate);
  std::printf(
      "goal: the transport within 80%% of ucx_perftest tag_bw at the same message size, class and error "
      "mode\n"
      "(a receiver on this machine is streamed over an endpoint without peer error handling, so UCX may use "
      "shared\n"
      "memory; the connection endpoint keeps peer error handling to notice a receiver that dies)\n");
  return 0;
}
