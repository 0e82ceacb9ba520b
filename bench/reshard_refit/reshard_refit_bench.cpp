// bench_reshard_refit: one refit across processes on this machine over the UCX transport (loopback:
// CMA / shared memory / TCP as UCX picks), three ways, each timed from "go" to the moment every
// receiver holds the version in its own layout, and each against ucx_perftest tag_bw measured in
// the same run with the transport's message size (16 MiB buckets):
//   dense     1 sender rank (whole tensors) -> 3 receivers, whole tensors each (a broadcast refit);
//   sparse    the same, with the run's sparse codec (core/refit: only the changed BF16 elements,
//             dense per tensor where denser); encode, send and apply are all in the time;
//   resharded 2 sender ranks (row shards: each holds half the rows of every tensor) -> 3 receivers
//             that want column shards (a third of the last dimension of every tensor): each rank
//             sends each receiver just the pieces it wants (sender ranks, transport_ucx README).
// Bytes on the wire per version: dense 3 x the model, sparse 3 x the message, resharded 1 x the
// model (every element once, to the one receiver that wants it). "vs perftest" is the achieved
// rate (those bytes / time) over ucx_perftest's rate for one sender-receiver pair.
//
// Tensor sets, from the reference model's own tensor lists (as bench_refit_path), BF16:
//   small       configs/models/small-100m.json whole (~100M parameters);
//   397b-layers configs/qwen35-397b/config.json, layers 0 (GDN) and 3 (attention) with 8 of their
//               512 experts (a whole layer is ~13 GB).
// Every dense and resharded version is checked bit for bit on every receiver (values are a hash of
// tensor, element and version); the sparse refit's receivers check every tensor's checksum.
//
//   bench_reshard_refit [--models small,397b] [--refits dense,sparse,resharded] [--reps N] [--changed-fraction F]
//                       [--checksum] [--no-perftest]
// The sender ranks and receivers are this executable started with --sender / --receiver (internal).
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "core/refit/refit_receiver.hpp"
#include "core/refit/refit_sender.hpp"
#include "model/config.hpp"
#include "model/layout.hpp"
#include "mlpt/sdk/reshard.hpp"
#include "mlpt/transport.h"
#include "ucx_perftest.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using mlpt::sdk::Box;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kReceivers = 3;
constexpr uint64_t kBucket = 16ull << 20;
constexpr DLDataType kBf16{kDLBfloat, 16, 1};

// ---- the tensor sets ----
struct TensorList {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  uint64_t bytes = 0;
};

TensorList tensor_list(const std::string& model) {
  const std::string configs = std::string(MLPT_SOURCE_DIR) + "/configs/";
  TensorList out;
  std::vector<std::string> only;
  mlpt::ref::ModelConfig config;
  if (model == "small") {
    config = mlpt::ref::load_model_config(configs + "models/small-100m.json");
  } else if (model == "397b") {
    config = mlpt::ref::load_model_config(configs + "qwen35-397b/config.json");
    config.num_experts = 8;  // of 512: the subset fits this machine's memory, five times over
    only = {config.prefix() + "layers.0.", config.prefix() + "layers.3."};
  } else {
    throw std::runtime_error("unknown model '" + model + "' (small, 397b)");
  }
  for (const auto& t : mlpt::ref::make_layout(config).tensors) {
    bool keep = only.empty();
    for (const auto& p : only) keep |= t.name.rfind(p, 0) == 0;
    if (!keep) continue;
    out.names.push_back(t.name);
    out.shapes.push_back(t.shape);
    out.bytes += static_cast<uint64_t>(t.numel()) * 2;
  }
  return out;
}

// Part `index` of `parts` along dimension `dim` (the first parts one larger); 0-d tensors whole.
Box split(const std::vector<int64_t>& shape, size_t dim, int64_t parts, int64_t index) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  if (shape.empty()) return b;
  const int64_t n = shape[dim], base = n / parts, extra = n % parts;
  b.offset[dim] = index * base + std::min(index, extra);
  b.extent[dim] = base + (index < extra ? 1 : 0);
  return b;
}
Box rows(const std::vector<int64_t>& shape, int64_t rank, int64_t ranks) { return split(shape, 0, ranks, rank); }
Box columns(const std::vector<int64_t>& shape, int64_t index, int64_t count) {
  return split(shape, shape.empty() ? 0 : shape.size() - 1, count, index);
}

// The value of element `flat` (global row-major index) of tensor `t` at `version`: a hash, so that
// any rank can make any part and any receiver can check it.
uint16_t value_at(size_t t, uint64_t flat, uint64_t version) {
  uint64_t x = (static_cast<uint64_t>(t) << 40) ^ flat ^ (version << 56) ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return static_cast<uint16_t>(x >> 17);
}

// Fills `box` of tensor `t` (global `shape`), row-major, at `version`.
void fill_box(size_t t, const std::vector<int64_t>& shape, const Box& box, uint64_t version, uint16_t* out) {
  const size_t nd = shape.size();
  if (box.elements() == 0) return;
  if (nd == 0) {
    out[0] = value_at(t, 0, version);
    return;
  }
  std::vector<int64_t> stride(nd, 1), at(nd, 0);
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * shape[d + 1];
  const int64_t run = box.extent[nd - 1];
  for (;;) {
    uint64_t flat = 0;
    for (size_t d = 0; d < nd; ++d) flat += static_cast<uint64_t>((box.offset[d] + (d + 1 < nd ? at[d] : 0)) * stride[d]);
    for (int64_t k = 0; k < run; ++k) *out++ = value_at(t, flat + static_cast<uint64_t>(k), version);
    size_t d = nd - 1;
    while (d > 0 && ++at[d - 1] == box.extent[d - 1]) at[d - 1] = 0, --d;
    if (d == 0) return;
  }
}

// One rank's part of the tensor set: its boxes, their memory and the ABI views.
struct Part {
  std::vector<Box> boxes;
  std::vector<std::vector<int64_t>> globals;
  std::vector<std::vector<uint16_t>> data;
  std::vector<mlpt_named_tensor> views;
  std::vector<mlpt_tensor_shard> shards;
  uint64_t bytes = 0;

  Part(const TensorList& list, std::vector<Box> b, bool allocate) : boxes(std::move(b)), globals(list.shapes) {
    const size_t n = boxes.size();
    data.resize(n), views.resize(n), shards.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto elements = static_cast<size_t>(boxes[i].elements());
      if (allocate) data[i].resize(elements);
      bytes += elements * 2;
      mlpt_named_tensor& v = views[i];
      v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      v.name = {list.names[i].data(), list.names[i].size()};
      v.tensor.data = allocate && elements ? data[i].data() : nullptr;
      v.tensor.device = {kDLCPU, 0};
      v.tensor.ndim = static_cast<int32_t>(boxes[i].extent.size());
      v.tensor.dtype = kBf16;
      v.tensor.shape = boxes[i].extent.data();
      shards[i] = mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, globals[i].data(), boxes[i].offset.data()};
    }
  }
  void fill(uint64_t version) {
    for (size_t i = 0; i < boxes.size(); ++i) fill_box(i, globals[i], boxes[i], version, data[i].data());
  }
};

using bench_ucx::Transport;

std::string config_of(int port, bool checksum) {
  return R"({"address": "127.0.0.1:)" + std::to_string(port) + R"(", "bucket_bytes": )" + std::to_string(kBucket) +
         R"(, "verify_checksum": )" + (checksum ? "true" : "false") + ", \"timeout_ms\": 120000";
}

// ---- a sender rank: "prep V" makes version V, "go V" sends it; answers "prepared V", "sent V BYTES" ----
int run_sender(const std::string& model, const std::string& scenario, int rank, int ranks, int port, bool checksum, double fraction) {
  const TensorList list = tensor_list(model);
  std::vector<Box> boxes;
  for (const auto& s : list.shapes) boxes.push_back(scenario == "resharded" ? rows(s, rank, ranks) : Box{std::vector<int64_t>(s.size(), 0), s});
  Part part(list, boxes, true);
  Transport t;
  const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {"trainer", 7}, rank, ranks};
  mlpt_transport* tx = t.create(MLPT_TRANSPORT_SENDER, config_of(port, checksum) + R"(, "receivers": 3})", &group);
  mlpt::refit::RefitSender encoder;
  std::mt19937_64 rng(7);
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string what;
    uint64_t v = 0;
    in >> what >> v;
    if (what == "prep") {
      if (scenario != "sparse" || v == 1) {
        part.fill(v);
      } else {  // an optimizer step as the refit sees it: `fraction` of the elements get new bits
        for (auto& d : part.data)
          for (size_t j = 0, k = static_cast<size_t>(static_cast<double>(d.size()) * fraction); j < k; ++j) d[rng() % d.size()] ^= 1;
      }
      std::printf("prepared %llu\n", static_cast<unsigned long long>(v));
    } else if (what == "go") {
      mlpt_transport_send_args a{};
      a.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
      a.transport = tx;
      a.version = v;
      a.timeout_ms = 120000;
      uint64_t bytes = part.bytes;
      if (scenario == "sparse") {
        const auto& message = encoder.prepare(v, part.views.data(), part.views.size());
        a.tensors = message.data();
        a.num_tensors = message.size();
        bytes = encoder.stats().bytes;
      } else {
        a.tensors = part.views.data();
        a.num_tensors = part.views.size();
        a.shards = part.shards.data();
      }
      mlpt::plugin::check(t.component, t.api->send(&a), "send");
      std::printf("sent %llu %llu\n", static_cast<unsigned long long>(v), static_cast<unsigned long long>(bytes));
    } else if (what == "quit") {
      break;
    }
    std::fflush(stdout);
  }
  t.api->destroy(tx);
  return 0;
}

// ---- a receiver: receives `versions` versions in its layout; "got V" once it holds V, then on
// "check V" checks it and answers "ok V" ----
int run_receiver(const std::string& model, const std::string& scenario, int index, int senders, int port, bool checksum, int versions) {
  const TensorList list = tensor_list(model);
  std::vector<Box> boxes;
  for (const auto& s : list.shapes)
    boxes.push_back(scenario == "resharded" ? columns(s, index, kReceivers) : Box{std::vector<int64_t>(s.size(), 0), s});
  Part want(list, boxes, false);
  Transport t;
  mlpt_transport* rx = t.create(MLPT_TRANSPORT_RECEIVER,
                                config_of(port, checksum) + R"(, "senders": )" + std::to_string(senders) + R"(, "name": "bench-receiver-)" +
                                    std::to_string(index) + "\"}",
                                nullptr);
  mlpt::refit::RefitReceiver decoder;
  std::vector<uint16_t> expect;
  for (uint64_t v = 1; v <= static_cast<uint64_t>(versions); ++v) {
    mlpt_transport_receive_args a{};
    a.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
    a.transport = rx;
    a.min_version = v;
    a.timeout_ms = 120000;
    if (scenario == "resharded") a.want_tensors = want.views.data(), a.want_shards = want.shards.data(), a.num_want = want.views.size();
    mlpt::plugin::check(t.component, t.api->receive(&a), "receive");
    const mlpt_named_tensor* got = a.out_tensors;
    size_t count = a.out_num_tensors;
    if (scenario == "sparse") {  // checks every tensor's checksum as it rebuilds it
      const auto& rebuilt = decoder.apply(a.out_version, a.out_tensors, a.out_num_tensors);
      got = rebuilt.data(), count = rebuilt.size();
    }
    std::printf("got %llu\n", static_cast<unsigned long long>(a.out_version));
    std::fflush(stdout);
    // Checked once every receiver holds it, so that no check takes a core from a refit still running.
    for (std::string line; std::getline(std::cin, line) && line.rfind("check", 0) != 0;) {
    }
    std::string bad;
    if (count != boxes.size()) bad = std::to_string(count) + " tensors";
    for (size_t i = 0; bad.empty() && scenario != "sparse" && i < count; ++i) {
      expect.resize(static_cast<size_t>(boxes[i].elements()));
      fill_box(i, list.shapes[i], boxes[i], a.out_version, expect.data());
      if (std::memcmp(static_cast<const uint8_t*>(got[i].tensor.data) + got[i].tensor.byte_offset, expect.data(), expect.size() * 2) != 0)
        bad = list.names[i] + " differs";
    }
    mlpt_transport_release_args r{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, rx, a.out_version, nullptr};
    mlpt::plugin::check(t.component, t.api->release(&r), "release");
    std::printf("%s %llu %s\n", bad.empty() ? "ok" : "bad", static_cast<unsigned long long>(a.out_version), bad.c_str());
    std::fflush(stdout);
  }
  t.api->destroy(rx);
  return 0;
}

// ---- the driver ----
// A child with its stdin and stdout on pipes.
class Proc {
 public:
  explicit Proc(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) throw std::runtime_error("cannot start " + argv[0]);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]), close(out[1]);
    to_ = in[1], from_ = out[0];
  }
  ~Proc() {
    close(to_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(from_);
  }
  void tell(const std::string& line) {
    std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) throw std::runtime_error("a child went away");
  }
  // The next line that starts with `word` (log lines and others skipped); throws after the timeout.
  std::string expect(const std::string& word, int timeout_ms = 300000) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      for (auto nl = buffer_.find('\n'); nl != std::string::npos; nl = buffer_.find('\n')) {
        std::string l = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (l.rfind(word, 0) == 0) return l;
        if (l.rfind("bad", 0) == 0 || l.rfind("error", 0) == 0) throw std::runtime_error("a child said: " + l);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) throw std::runtime_error("no '" + word + "' from a child in time");
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) throw std::runtime_error("a child ended before saying '" + word + "'");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

struct Result {
  double best = 0, median = 0, worst = 0;  // seconds until every receiver held the version
  uint64_t wire = 0;            // bytes on the wire per version (the timed ones)
  std::string error;
};

Result measure(const std::string& self, const std::string& model, const std::string& scenario, const TensorList& list, int reps,
               bool checksum, double fraction) {
  const int senders = scenario == "resharded" ? 2 : 1, versions = 1 + reps;  // version 1: connect, plan, fault in
  const int port = free_port();
  Result r;
  try {
    std::vector<std::unique_ptr<Proc>> tx, rx;
    const std::string cs = checksum ? "1" : "0";
    for (int s = 0; s < senders; ++s)
      tx.push_back(std::make_unique<Proc>(std::vector<std::string>{self, "--sender", model, scenario, std::to_string(s), std::to_string(senders),
                                                                   std::to_string(port), cs, std::to_string(fraction)}));
    for (auto& p : tx) p->expect("ready");
    for (int j = 0; j < kReceivers; ++j)
      rx.push_back(std::make_unique<Proc>(std::vector<std::string>{self, "--receiver", model, scenario, std::to_string(j),
                                                                   std::to_string(senders), std::to_string(port), cs, std::to_string(versions)}));
    std::vector<double> times;
    for (int v = 1; v <= versions; ++v) {
      const std::string vs = std::to_string(v);
      for (auto& p : tx) p->tell("prep " + vs);
      for (auto& p : tx) p->expect("prepared " + vs);
      const auto t0 = Clock::now();
      for (auto& p : tx) p->tell("go " + vs);
      for (auto& p : rx) p->expect("got " + vs);
      const double took = seconds_since(t0);
      for (auto& p : rx) p->tell("check " + vs);
      uint64_t sent = 0;
      for (auto& p : tx) sent += std::stoull(p->expect("sent " + vs).substr(6 + vs.size()));
      for (auto& p : rx) p->expect("ok " + vs);
      if (v == 1) continue;
      times.push_back(took);
      // Dense and sparse: every receiver gets what the one rank sent. Resharded: every element once.
      r.wire = scenario == "resharded" ? list.bytes : kReceivers * sent;
    }
    for (auto& p : tx) p->tell("quit");
    std::sort(times.begin(), times.end());
    r.best = times.front(), r.median = times[times.size() / 2], r.worst = times.back();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 9 && std::string(argv[1]) == "--sender")
      return run_sender(argv[2], argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]), std::string(argv[7]) == "1",
                        std::stod(argv[8]));
    if (argc == 9 && std::string(argv[1]) == "--receiver")
      return run_receiver(argv[2], argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]), std::string(argv[7]) == "1",
                          std::stoi(argv[8]));
  } catch (const std::exception& e) {
    std::printf("error %s\n", e.what());
    std::fflush(stdout);
    return 2;
  }
  std::vector<std::string> models = {"small", "397b"};
  int reps = 3;
  double fraction = 0.015;
  std::vector<std::string> refits = {"dense", "sparse", "resharded"};
  bool checksum = false, perftest = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--models" && i + 1 < argc) {
      models.clear();
      std::stringstream s(argv[++i]);
      for (std::string m; std::getline(s, m, ',');) models.push_back(m);
    } else if (a == "--refits" && i + 1 < argc) {
      refits.clear();
      std::stringstream s(argv[++i]);
      for (std::string m; std::getline(s, m, ',');) refits.push_back(m);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--changed-fraction" && i + 1 < argc) {
      fraction = std::stod(argv[++i]);
    } else if (a == "--checksum") {
      checksum = true;
    } else if (a == "--no-perftest") {
      perftest = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--models small,397b] [--refits dense,sparse,resharded] [--reps N] [--changed-fraction F] [--checksum] "
                   "[--no-perftest]\n",
                   argv[0]);
      return 64;
    }
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::printf("bench_reshard_refit: %d receivers, 16 MiB buckets, checksums %s, %d timed refits per row after one warm-up (medians); sparse: "
              "%.2f%% of the elements change per step\n",
              kReceivers, checksum ? "on" : "off", reps, 100 * fraction);
  std::printf("UCX_TLS=%s (the same environment for ucx_perftest)\n", std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "unset");
  for (const auto& model : models) {
    const TensorList list = tensor_list(model);
    const auto pt = perftest ? bench_ucx::perftest_median(kBucket, list.bytes, false, 3) : bench_ucx::PerftestRate{};
    const auto pe = perftest ? bench_ucx::perftest_median(kBucket, list.bytes, true, 3) : bench_ucx::PerftestRate{};
    std::printf("\n%s: %zu tensors, %.1f MiB BF16; ucx_perftest tag_bw 16 MiB, median of 3: %.2f GB/s (%.2f-%.2f); with -e, the "
                "transport's error mode: %.2f GB/s (%.2f-%.2f)\n",
                model.c_str(), list.names.size(), static_cast<double>(list.bytes) / 1048576.0, pt.median, pt.low, pt.high, pe.median,
                pe.low, pe.high);
    std::printf("  %-10s %-7s %12s %14s %10s %19s %9s %11s %9s %10s\n", "refit", "ranks", "wire MiB/v", "MiB/receiver", "median s",
                "(spread)", "GB/s", "vs perftest", "vs -e", "vs dense");
    double dense_median = 0;
    for (const std::string& scenario : refits) {
      const Result r = measure(self, model, scenario, list, reps, checksum, fraction);
      if (!r.error.empty()) {
        std::printf("  %-10s failed: %s\n", scenario.c_str(), r.error.c_str());
        continue;
      }
      if (scenario == "dense") dense_median = r.median;
      const double rate = static_cast<double>(r.wire) / r.median / 1e9;
      char vs_pt[32] = "-", vs_pe[32] = "-", vs_dense[32] = "-", spread[48];
      if (pt.median > 0) std::snprintf(vs_pt, sizeof(vs_pt), "%.2f", rate / pt.median);
      if (pe.median > 0) std::snprintf(vs_pe, sizeof(vs_pe), "%.2f", rate / pe.median);
      if (dense_median > 0) std::snprintf(vs_dense, sizeof(vs_dense), "%.3f", r.median / dense_median);
      std::snprintf(spread, sizeof(spread), "(%.4f-%.4f)", r.best, r.worst);
      // What each receiver ends up holding: the whole model, or its third of every tensor.
      const double held = scenario == "resharded" ? static_cast<double>(list.bytes) / kReceivers : static_cast<double>(list.bytes);
      std::printf("  %-10s %-7s %12.1f %14.1f %10.4f %19s %9.2f %11s %9s %10s\n", scenario.c_str(),
                  scenario == "resharded" ? "2 -> 3" : "1 -> 3", static_cast<double>(r.wire) / 1048576.0, held / 1048576.0, r.median,
                  spread, rate, vs_pt, vs_pe, vs_dense);
      std::fflush(stdout);
    }
  }
  std::printf("\nEvery time is the median of the timed refits with its spread (fastest-slowest); vs perftest: (wire bytes / median "
              "time) over ucx_perftest's median rate for one pair; vs dense: median time over the dense refit's median time (same "
              "tensors, same receivers, same run)\n");
  return 0;
}
