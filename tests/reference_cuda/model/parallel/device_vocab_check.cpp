// An MPI program (one process per TP rank, mpirun -np tp) that checks the device model's
// vocabulary-parallel embedding and LM head (device_model/vocab_head.hpp, bf16 emulated on the CPU)
// for a vocabulary of --vocab ids of which the first --valid are real. World rank 0 prints one JSON
// line; every rank exits 1 when a check fails.
//
// The model: the same TP layout with the vocabulary split and whole, on the same batch. The split
// embedding adds one rank's row to zeros, so the final hidden states and every gradient of <hidden,
// R> are the same bits, the embedding's gradient rows those of the rank's range.
//
// The head against one rank's (logits of the whole vocabulary, token_logprobs and its backward),
// on those hidden states with random targets among the real ids and random loss coefficients (some
// 0): each quantity within a bound derived from the rounding both sides do, per element, u = 2^-24
// (fp32) and b = 2^-8 (bf16):
//   lse, logprob: δ (the logits' own gap, 0 where the product is computed alike) plus the fp32 sums
//   of exp over V and V/tp terms and the exps' arguments, u (V + V/tp + 2 R + 8 + 2|lse| (+ 2|lp|)),
//   R the row's spread;
//   d logits: |c| p (exp(δ + Δlse + 2u(|l − lse| + 1)) − 1) + b (|d1| + |d2|);
//   d hidden: Σ_v |Δd_v| |W_vi| + b (Σ_r |part_r| + |h1| + |h2|) + (V + tp) u Σ_v (|d1| + |d2|) |W_vi|;
//   d W (LM head rows): Σ_rows |Δd| |h| + 2 rows u Σ_rows (|d1| + |d2|) |h|.
// Sampling: the rows gathered whole (what the engine group draws from) hold each rank's logits in
// its range's columns, bit for bit; the draws from them against one rank's are reported.
// The report gives each quantity's largest error and its largest ratio to the bound.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/vocab_head.hpp"
#include "device_model_fixtures.hpp"
#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/shard_weights.hpp"
#include "mpi_check_main.hpp"

using namespace mlpt::ref;
using namespace model_testing;

namespace {

constexpr double kU = 0x1p-24, kB = 0x1p-8;

float widen(uint16_t bits) {
  const uint32_t w = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
std::vector<float> widen(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = widen(bits[i]);
  return f;
}

template <class T>
std::vector<T> host_copy(Ops& ops, const void* p, size_t n) {
  std::vector<T> h(n);
  if (n) ops.to_host(h.data(), p, n * sizeof(T));
  return h;
}

// The final hidden states and the gradients of <hidden, R> of a shard on the batch.
struct ModelRun {
  std::vector<uint16_t> hidden;  // bf16 bits
  Weights<float> grads;
};

ModelRun run_model(Ops& ops, const Weights<float>& w, const std::vector<int32_t>& tokens,
                   const std::vector<int64_t>& offsets, const std::vector<float>& R,
                   const ModelParallel* parallel) {
  const dev::DeviceWeights d = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();
  const int64_t N = offsets.back(), L = w.config.num_layers, k = w.config.experts_per_token;
  std::vector<int16_t> routed(size_t(N * L * k));
  dev::DeviceBatch b;
  b.tokens = tokens, b.offsets = offsets, b.parallel = parallel, b.routed_experts = routed.data();
  Buffer hidden, inputs, d_hidden;
  dev::forward_hidden(ops, d, b, *ws, hidden, &inputs);
  ModelRun r;
  r.hidden = host_copy<uint16_t>(ops, hidden.get(), R.size());
  std::vector<bf16> dh(R.size());
  for (size_t i = 0; i < R.size(); ++i) dh[i] = to_bf16(R[i]);
  upload(ops, d_hidden, dh);
  std::vector<Buffer> grads;
  for (const auto& t : d.layout.tensors) {
    grads.emplace_back(ops, size_t(std::max<int64_t>(t.numel(), 1)) * 4);
    ops.zero(grads.back().get(), grads.back().bytes());
  }
  b.routed_experts = nullptr;
  dev::backward(ops, d, b, inputs, routed.data(), d_hidden.as<bf16>(), grads, true, *ws);
  r.grads = zeros_like_layout<float>(w.config, d.layout);
  for (size_t i = 0; i < grads.size(); ++i)
    if (!r.grads.values[i].empty())
      ops.to_host(r.grads.values[i].data(), grads[i].get(), r.grads.values[i].size() * 4);
  return r;
}

// The LM head's outputs the trainer uses, on the host.
struct HeadRun {
  std::vector<float> logits, logprob, lse, dlogits, d_hidden, d_hidden_part, d_head;
  std::vector<float> whole;      // the rows gathered whole for sampling, [rows, vocab_size]
  std::vector<int32_t> sampled;  // a draw from each whole row (top-p 0.9, the engine's sampler)
};

// One rank's head (the whole vocabulary, the one-rank ops) or a rank's range through VocabHead.
HeadRun run_head(Ops& ops, const ModelConfig& c, const std::vector<float>& head, Communicator* tensor,
                 int64_t valid, const std::vector<uint16_t>& hidden, const std::vector<int32_t>& targets,
                 const std::vector<float>& coef) {
  const int64_t rows = static_cast<int64_t>(targets.size()), H = c.hidden_size;
  dev::VocabHead vh(c, tensor, valid);
  const int64_t V = vh.width();
  std::vector<bf16> W(head.size()), h(hidden.size());
  for (size_t i = 0; i < head.size(); ++i) W[i] = to_bf16(head[i]);
  for (size_t i = 0; i < hidden.size(); ++i) std::memcpy(&h[i], &hidden[i], 2);
  Buffer dW, dhid, dtg, dcoef, logits(ops, size_t(rows * V) * 4), lp(ops, size_t(rows) * 4),
      lse(ops, size_t(rows) * 4), dl(ops, size_t(rows * V) * 2), dh(ops, size_t(rows * H) * 2),
      grad(ops, size_t(V * H) * 4);
  upload(ops, dW, W), upload(ops, dhid, h), upload(ops, dcoef, coef);
  const int32_t* t = upload(ops, dtg, dev::vocab_local_ids(vh.range(), targets));
  ops.zero(grad.get(), grad.bytes());
  ops.logits_forward(rows, V, H, dhid.as<bf16>(), dW.as<bf16>(), logits.as<float>());
  vh.logprobs(ops, rows, logits.as<float>(), t, lp.as<float>(), lse.as<float>());
  vh.logprobs_backward(ops, rows, logits.as<float>(), lse.as<float>(), t, dcoef.as<float>(), dl.as<bf16>());
  ops.linear_backward_input(rows, V, H, dl.as<bf16>(), dW.as<bf16>(), dh.as<bf16>(), false);
  ops.linear_backward_weight(rows, V, H, dl.as<bf16>(), dhid.as<bf16>(), grad.as<float>());
  HeadRun r;
  r.d_hidden_part = widen(host_copy<uint16_t>(ops, dh.get(), size_t(rows * H)));
  vh.sum_input_gradient(ops, dh.as<bf16>(), rows * H);
  r.logits = host_copy<float>(ops, logits.get(), size_t(rows * V));
  r.logprob = host_copy<float>(ops, lp.get(), size_t(rows));
  r.lse = host_copy<float>(ops, lse.get(), size_t(rows));
  r.dlogits = widen(host_copy<uint16_t>(ops, dl.get(), size_t(rows * V)));
  r.d_hidden = widen(host_copy<uint16_t>(ops, dh.get(), size_t(rows * H)));
  r.d_head = host_copy<float>(ops, grad.get(), size_t(V * H));
  const float* whole = vh.whole_rows(ops, rows, logits.as<float>());
  r.whole = host_copy<float>(ops, whole, size_t(rows * c.vocab_size));
  std::vector<SamplingRow> params(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) params[size_t(i)] = {1.f, 0.9f, 7, uint64_t(i)};
  Buffer dp, tok(ops, size_t(rows) * 4), slp(ops, size_t(rows) * 4);
  ops.sample_tokens(rows, c.vocab_size, valid, whole, upload(ops, dp, params), tok.as<int32_t>(),
                    slp.as<float>());
  r.sampled = host_copy<int32_t>(ops, tok.get(), size_t(rows));
  return r;
}

// The largest error and its largest ratio to its bound over the checked elements.
struct Gap {
  double worst = 0, ratio = 0;
  void add(double error, double bound) {
    worst = std::max(worst, error);
    ratio = std::max(ratio, bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0));
  }
  void reduce_max() {  // over the ranks
    double v[2] = {worst, ratio};
    MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    worst = v[0], ratio = v[1];
  }
  nlohmann::json json() const { return {{"max_error", worst}, {"max_ratio_to_bound", ratio}}; }
};

std::vector<double> sum_over_ranks(std::vector<double> v) {
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

int check(int argc, char** argv) {
  int64_t vocab = 300, valid = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--vocab")
      vocab = std::stoll(argv[i + 1]);
    else if (a == "--valid")
      valid = std::stoll(argv[i + 1]);
    else
      throw std::runtime_error("unknown argument " + a);
  }
  int tp = 1;  // the world's size
  MPI_Comm_size(MPI_COMM_WORLD, &tp);
  MpiModelLayout layout(tp, 1);
  ModelConfig cfg = small_config();
  cfg.vocab_size = vocab;
  cfg.gdn_key_heads = 4;  // GDN heads that split over TP4 as well
  const Weights<float> w = bf16_exact_weights(cfg, 42);
  const ModelShard split = layout.shard();
  ModelShard whole = split;
  whole.vocab_parallel = false;
  cpu::Bf16Ops ops;
  std::mt19937_64 rng(3);
  const std::vector<int64_t> offsets{0, 37, 38, 96};
  const int64_t N = offsets.back(), H = cfg.hidden_size;
  const std::vector<int32_t> tokens = random_tokens(rng, N, vocab);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> R(size_t(N * H));
  for (float& x : R) x = round_bf16(normal(rng));

  // The model with the vocabulary split against whole, same layout: the same bits.
  const Weights<float> split_w = shard_weights(w, split), whole_w = shard_weights(w, whole);
  const ModelRun a = run_model(ops, split_w, tokens, offsets, R, &layout.groups());
  const ModelRun b = run_model(ops, whole_w, tokens, offsets, R, &layout.groups());
  const VocabRange range = vocab_range(vocab, split);
  const int embed = a.grads.layout.embed, lm_head = a.grads.layout.lm_head;
  bool model_equal = a.hidden == b.hidden, embed_rows_equal = true;
  for (size_t i = 0; i < a.grads.values.size(); ++i) {
    if (int(i) == lm_head) continue;  // the loss's, checked below
    if (int(i) == embed) {
      const auto& g = a.grads.values[i];
      embed_rows_equal = g.size() == size_t(range.count() * H) &&
                         std::equal(g.begin(), g.end(), b.grads.values[i].begin() + range.begin * H);
      continue;
    }
    model_equal = model_equal && a.grads.values[i] == b.grads.values[i];
  }

  // The head on those hidden states against one rank's.
  std::vector<int32_t> targets(static_cast<size_t>(N));
  std::vector<float> coef(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) {
    targets[size_t(r)] = static_cast<int32_t>(rng() % uint64_t(valid));
    coef[size_t(r)] = r % 5 == 0 ? 0.f : normal(rng);
  }
  const HeadRun one =
      run_head(ops, w.config, w.values[size_t(w.layout.lm_head)], nullptr, valid, a.hidden, targets, coef);
  const HeadRun many = run_head(ops, split_w.config, split_w.values[size_t(lm_head)], layout.groups().tensor,
                                valid, a.hidden, targets, coef);
  const int64_t Vl = range.count(), mine = std::clamp<int64_t>(valid - range.begin, 0, Vl);
  // δ per row: the logits' gap on this rank's columns, the largest over the ranks.
  std::vector<double> delta(size_t(N), 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t v = 0; v < Vl; ++v)
      delta[size_t(r)] =
          std::max(delta[size_t(r)], double(std::fabs(many.logits[size_t(r * Vl + v)] -
                                                      one.logits[size_t(r * vocab + range.begin + v)])));
  MPI_Allreduce(MPI_IN_PLACE, delta.data(), static_cast<int>(N), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  Gap lse_gap, lp_gap, dl_gap, dh_gap, dw_gap, logit_gap;
  for (int64_t r = 0; r < N; ++r) {
    const float* l = one.logits.data() + r * vocab;
    double mx = -INFINITY, mn = INFINITY;
    for (int64_t v = 0; v < valid; ++v) mx = std::max(mx, double(l[v])), mn = std::min(mn, double(l[v]));
    const double sums = double(vocab + vocab / tp + 2 * (mx - mn) + 8);
    const double dl = delta[size_t(r)], lse1 = one.lse[size_t(r)], lp1 = one.logprob[size_t(r)];
    logit_gap.add(dl, 0.0);
    lse_gap.add(std::fabs(many.lse[size_t(r)] - lse1), dl + kU * (sums + 2 * std::fabs(lse1)));
    lp_gap.add(std::fabs(many.logprob[size_t(r)] - lp1),
               2 * dl + kU * (sums + 2 * std::fabs(lse1) + 2 * std::fabs(lp1)));
    const double dlse = std::fabs(many.lse[size_t(r)] - lse1);
    for (int64_t v = 0; v < Vl; ++v) {
      const double d1 = one.dlogits[size_t(r * vocab + range.begin + v)],
                   d2 = many.dlogits[size_t(r * Vl + v)];
      const double x = double(l[range.begin + v]) - lse1, p = v < mine ? std::exp(x) : 0.0;
      const double bound =
          std::fabs(coef[size_t(r)]) * p * std::expm1(dl + dlse + 2 * kU * (std::fabs(x) + 1)) +
          kB * (std::fabs(d1) + std::fabs(d2));
      dl_gap.add(std::fabs(d1 - d2), bound);
    }
  }
  // A product's terms of the d hidden and d W bounds, row r's column v by w: |Δd| w, (|d1| + |d2|) w.
  auto add_terms = [&](int64_t r, int64_t v, double w, double& diff, double& mass) {
    const double d1 = one.dlogits[size_t(r * vocab + range.begin + v)], d2 = many.dlogits[size_t(r * Vl + v)];
    diff += std::fabs(d1 - d2) * w, mass += (std::fabs(d1) + std::fabs(d2)) * w;
  };
  // d hidden: this rank's columns' terms of the bound, summed over the ranks.
  const std::vector<float>& Wl = split_w.values[size_t(lm_head)];
  std::vector<double> terms(size_t(N * H * 2), 0.0);  // Σ_v |Δd||W|, Σ_v (|d1| + |d2|)|W|
  std::vector<double> parts(size_t(N * H));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < H; ++i) {
      double diff = 0, mass = 0;
      for (int64_t v = 0; v < Vl; ++v) add_terms(r, v, std::fabs(Wl[size_t(v * H + i)]), diff, mass);
      terms[size_t((r * H + i) * 2)] = diff, terms[size_t((r * H + i) * 2 + 1)] = mass;
      parts[size_t(r * H + i)] = std::fabs(many.d_hidden_part[size_t(r * H + i)]);
    }
  terms = sum_over_ranks(terms), parts = sum_over_ranks(parts);
  for (int64_t j = 0; j < N * H; ++j) {
    const double h1 = one.d_hidden[size_t(j)], h2 = many.d_hidden[size_t(j)];
    dh_gap.add(std::fabs(h1 - h2), terms[size_t(j * 2)] +
                                       kB * (parts[size_t(j)] + std::fabs(h1) + std::fabs(h2)) +
                                       double(vocab + tp) * kU * terms[size_t(j * 2 + 1)]);
  }
  // The LM head's gradient rows of this rank's range.
  for (int64_t v = 0; v < Vl; ++v)
    for (int64_t i = 0; i < H; ++i) {
      double diff = 0, mass = 0;
      for (int64_t r = 0; r < N; ++r)
        add_terms(r, v, std::fabs(widen(a.hidden[size_t(r * H + i)])), diff, mass);
      dw_gap.add(std::fabs(many.d_head[size_t(v * H + i)] - one.d_head[size_t((range.begin + v) * H + i)]),
                 diff + 2 * double(N) * kU * mass);
    }
  // Sampling's whole rows: this rank's columns are its logits, bit for bit, in every row.
  bool whole_rows = many.whole.size() == size_t(N * vocab);
  for (int64_t r = 0; whole_rows && r < N; ++r)
    whole_rows = std::equal(many.logits.begin() + r * Vl, many.logits.begin() + (r + 1) * Vl,
                            many.whole.begin() + r * vocab + range.begin);
  int64_t same_draws = 0;
  for (int64_t r = 0; r < N; ++r) same_draws += many.sampled[size_t(r)] == one.sampled[size_t(r)];
  for (Gap* g : {&lse_gap, &lp_gap, &dl_gap, &dh_gap, &dw_gap, &logit_gap}) g->reduce_max();
  int equal[3] = {model_equal ? 1 : 0, embed_rows_equal ? 1 : 0, whole_rows ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, equal, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const bool within =
      lse_gap.ratio <= 1 && lp_gap.ratio <= 1 && dl_gap.ratio <= 1 && dh_gap.ratio <= 1 && dw_gap.ratio <= 1;
  const nlohmann::json report{{"tp", tp},
                              {"vocab", vocab},
                              {"valid", valid},
                              {"range_begin_last_rank", vocab_range(vocab, tp, tp - 1).begin},
                              {"model_bitwise_equal", equal[0] == 1},
                              {"embedding_rows_equal", equal[1] == 1},
                              {"whole_rows_placed", equal[2] == 1},
                              {"draws_equal_one_rank", same_draws},
                              {"rows", N},
                              {"logits_gap", logit_gap.worst},
                              {"lse", lse_gap.json()},
                              {"logprob", lp_gap.json()},
                              {"dlogits", dl_gap.json()},
                              {"d_hidden", dh_gap.json()},
                              {"d_lm_head", dw_gap.json()}};
  if (layout.world_rank() == 0) std::cout << report.dump() << std::endl;
  return equal[0] == 1 && equal[1] == 1 && equal[2] == 1 && within ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return mlpt_test::mpi_check_main(argc, argv, "device_vocab_check", check);
}
