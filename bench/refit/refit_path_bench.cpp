// bench_refit_path: what one refit costs on the path the run takes (the sparse transport plugin, plugins/transport_sparse),
// sparse against dense, in the same process. Sparse: the trainer's side compares the new weights
// with the last version sent, encodes what changed and checksums every tensor
// (sparse_refit::RefitSender); the engine's side applies the delta to its copy and checks every tensor
// (sparse_refit::RefitReceiver). Dense baseline: one memcpy of the weights into the engine's copy, the
// least any dense refit costs before a byte crosses a link. Both as ratios, plus the link
// bandwidth below which sparse wins end to end (its extra CPU time equals the wire time it saves).
//
// Models, each from its real tensor list (the reference model's layout):
//   tiny         configs/models/tiny.json whole, FP32 (what the tiny run moves) and BF16;
//   397b-subset  configs/qwen35-397b/config.json, layers 0 (GDN) and 3 (attention) with 8 of
//                their 512 experts (a whole layer is ~13 GB in BF16), BF16.
// Each step changes a fraction of the elements at random positions (default 1.5%: bench_refit_steps
// measures 1.2-1.7% per benchmark-settings AdamW step on the ~100M config).
//
//   bench_refit_path [--changed-fraction F] [--steps N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_weights.hpp"
#include "refit_receiver.hpp"
#include "refit_sender.hpp"

using namespace mlpt;
using refit_bench::make_model;
using refit_bench::Model;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void run(Model m, double fraction, int steps) {
  sparse_refit::RefitSender sender;
  sparse_refit::RefitReceiver receiver;
  std::vector<std::byte> engine_copy(m.bytes);
  std::mt19937_64 rng(7);
  std::printf("%s: %zu tensors, %.1f MiB (%s)\n", m.label.c_str(), m.names.size(), static_cast<double>(m.bytes) / 1048576.0,
              m.dtype.bits == 16 ? "bf16" : "fp32");
  for (int v = 1; v <= steps + 1; ++v) {
    if (v > 1) refit_bench::step(m, fraction, rng);
    auto t0 = Clock::now();
    const auto& msg = sender.prepare(static_cast<uint64_t>(v), m.views.data(), m.views.size());
    const double encode_s = seconds_since(t0);
    auto t1 = Clock::now();
    const auto& rebuilt = receiver.apply(static_cast<uint64_t>(v), msg.data(), msg.size());
    const double apply_s = seconds_since(t1);
    bool exact = rebuilt.size() == m.data.size();
    for (size_t i = 0; exact && i < rebuilt.size(); ++i) exact = std::memcmp(rebuilt[i].tensor.data, m.data[i].data(), m.data[i].size()) == 0;
    // Baseline: the dense refit's least cost, one copy of every weight into the engine's memory.
    auto t2 = Clock::now();
    size_t off = 0;
    for (const auto& d : m.data) std::memcpy(engine_copy.data() + off, d.data(), d.size()), off += d.size();
    const double dense_s = seconds_since(t2);
    const auto& s = sender.stats();
    const double sparse_s = encode_s + apply_s;
    const double saved_bytes = static_cast<double>(s.dense_bytes) - static_cast<double>(s.bytes);
    const double extra_s = sparse_s - dense_s;
    std::printf("  refit %d %-5s: changed %.3f%%  bytes %.4f of dense (%.2f of %.2f MiB)  time %.2fx the dense copy "
                "(encode %.4f s + apply %.4f s vs memcpy %.4f s)",
                v, s.full ? "full" : "delta", 100.0 * static_cast<double>(s.changed) / static_cast<double>(s.numel),
                static_cast<double>(s.bytes) / static_cast<double>(s.dense_bytes), static_cast<double>(s.bytes) / 1048576.0,
                static_cast<double>(s.dense_bytes) / 1048576.0, sparse_s / dense_s, encode_s, apply_s, dense_s);
    if (saved_bytes > 0 && extra_s > 0) std::printf("; sparse wins on links below %.1f Gb/s", saved_bytes * 8 / extra_s / 1e9);
    std::printf("; %s\n", exact ? "bit-exact" : "DIFFERS");
    if (!exact) std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  double fraction = 0.015;
  int steps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--changed-fraction") fraction = std::atof(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_refit_path [--changed-fraction F] [--steps N]\n");
      return 2;
    }
  }
  const std::string configs = std::string(MLPT_SOURCE_DIR) + "/configs/";
  std::printf("bench_refit_path: %.3f%% of the elements change per step\n", 100 * fraction);
  const auto tiny = ref::load_model_config(configs + "models/tiny.json");
  run(make_model("tiny", tiny, {kDLFloat, 32, 1}, {}), fraction, steps);
  run(make_model("tiny", tiny, {kDLBfloat, 16, 1}, {}), fraction, steps);
  auto big = ref::load_model_config(configs + "qwen35-397b/config.json");
  big.num_experts = 8;  // of 512: the subset fits this machine's memory
  const std::string p = big.prefix() + "layers.";
  run(make_model("397b-subset (layers 0 and 3, 8 of 512 experts)", big, {kDLBfloat, 16, 1}, {p + "0.", p + "3."}), fraction, steps);
  return 0;
}
