// The qwen35_cuda engine against the CPU: its sampled tokens and logprobs against the fp32 CPU
// model's distribution at every generated position, its tokens against qwen35_cpu's with the same
// seeds, decode against prefill, sessions, weight loads (host tensors and the CUDA trainer's device
// tensors), a group's shared prompt through the prefix cache with routed experts recorded and its
// filled KV blocks shared, and an exhausted KV pool.
//
// Tolerances, stated: logprobs within 0.05 of the CPU model's (bf16 weights and activations, as
// model_test); every GPU token's interval of the CPU's cumulative distribution (after the same
// tokens, same draw) within 0.02 of the draw; qwen35_cpu's tokens equal to the GPU's up to the
// first position where the CPU's own draw differs; decode against prefill of the same tokens on
// the GPU: logprobs within 0.03, the same tokens; a group's prompt routing (through the prefix
// cache) equal to a cold engine's in at least 99% of entries (bf16 near-ties of the router).
// The logprob and draw bounds are widened at each position by 4x the fp32 model's own spread there
// under 2^-9 weight perturbations (tests/support/device_model_fixtures.hpp): this small random
// model has ill-conditioned positions (the first GPU run missed 0.05 by up to 0.37 at a few).
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "backends/cuda/components/engine_backend.hpp"
#include "backends/cuda/components/trainer.hpp"
#include "engine/cpu_backend.hpp"
#include "cpu_logits.hpp"
#include "gpu_model_fixtures.hpp"
#include "model/counter_uniform.hpp"
#include "model/model.hpp"
#include "model/named_tensors.hpp"
#include "model/sampling.hpp"

using namespace cuda_testing;
using mlpt::sdk::GenerationRequest;

namespace {

constexpr double kLogprobTol = 0.05, kDrawMargin = 0.02, kDecodeTol = 0.03;

struct Ask {
  std::vector<int32_t> tokens;
  float temperature = 1.f, top_p = 1.f;
  int32_t top_k = 0;
  uint64_t seed = 1, session = 0;
  int32_t max_new = 16;
  bool record = false;  // routed experts
};

std::shared_ptr<GenerationRequest> request(uint64_t id, const Ask& a) {
  auto r = std::make_shared<GenerationRequest>();
  r->id = id;
  r->session_id = a.session;
  r->tokens = a.tokens;
  r->sampling.struct_size = MLPT_SAMPLING_PARAMS_STRUCT_SIZE;
  r->sampling.temperature = a.temperature;
  r->sampling.top_p = a.top_p;
  r->sampling.top_k = a.top_k;
  r->sampling.seed = a.seed;
  r->max_new_tokens = a.max_new;
  r->record_routed_experts = a.record;
  return r;
}

// Submits all at once (one continuous batch) and waits for all.
std::vector<std::shared_ptr<GenerationRequest>> run(mlpt::sdk::Engine& e, const std::vector<Ask>& asks) {
  static uint64_t next_id = 1;
  std::vector<std::shared_ptr<GenerationRequest>> out;
  for (const Ask& a : asks) {
    out.push_back(request(next_id++, a));
    e.submit(out.back());
  }
  for (auto& r : out) r->wait();
  return out;
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % uint64_t(vocab));
  return t;
}

// Where `token` sits in the CPU's sampling distribution: its cumulative interval [lo, hi) in the
// samplers' walk (model/sampling.hpp: id order; with top-k / top-p the kept ids from the most
// likely, ties in id order) and its log-probability.
struct Slot {
  double lo = 0, hi = 0, logprob = -INFINITY;
};
Slot slot_of(const float* logits, int64_t valid, const Ask& a, int32_t token) {
  std::vector<double> p(static_cast<size_t>(valid));
  double mx = -INFINITY;
  for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, double(logits[i]) / a.temperature);
  for (int64_t i = 0; i < valid; ++i) p[i] = std::exp(double(logits[i]) / a.temperature - mx);
  std::vector<int32_t> walk(p.size());
  std::iota(walk.begin(), walk.end(), 0);
  if (a.top_p < 1.f || (a.top_k > 0 && a.top_k < valid)) {  // the most likely top_k, then the top-p prefix
    std::stable_sort(walk.begin(), walk.end(), [&](int32_t x, int32_t y) { return p[x] > p[y]; });
    if (a.top_k > 0 && a.top_k < valid) walk.resize(static_cast<size_t>(a.top_k));
    double total = 0, cum = 0;
    for (int32_t id : walk) total += p[id];
    size_t n = 0;
    while (n < walk.size()) {
      cum += p[walk[n++]];
      if (cum >= double(a.top_p) * total) break;
    }
    walk.resize(n);
  }
  double z = 0;
  for (int32_t id : walk) z += p[id];
  Slot s;
  double acc = 0;
  for (int32_t id : walk) {
    if (id == token) s = Slot{acc / z, (acc + p[id]) / z, std::log(p[id] / z)};
    acc += p[id];
  }
  return s;
}

struct Checkpoint;
void check_same_draw(const Checkpoint& ck, const Ask& a, const GenerationRequest& got, int32_t token, float logprob);

struct Checkpoint {
  TempDir dir{"cuda_engine_test"};
  ModelConfig cfg = small_config();
  Weights<float> w = bf16_exact_weights(cfg, 13);
  std::string path = (dir.path / "ck").string();
  Checkpoint() { mlpt::ref::save_checkpoint(path, w, mlpt::ref::Dtype::f32); }
  std::string settings(const std::string& extra = "") const {
    return R"({"checkpoint": ")" + path + R"(", "max_step_tokens": 48)" + extra + "}";
  }
};

// `got` (one new token after a.tokens) drew `token` with `logprob`, as another GPU computation of the
// same tokens did: required unless the draw lies within rounding of the edge of that token's
// interval (judged on the CPU's distribution).
void check_same_draw(const Checkpoint& ck, const Ask& a, const GenerationRequest& got, int32_t token, float logprob) {
  REQUIRE(got.out_tokens.size() == 1);
  const size_t pos = a.tokens.size();
  const auto logits = cpu_logits(ck.w, a.tokens);
  const Slot s = slot_of(logits.data() + (pos - 1) * size_t(ck.cfg.vocab_size), ck.cfg.vocab_size, a, token);
  const double u = mlpt::ref::counter_uniform(a.seed, pos);
  const double edge = std::min(std::fabs(u - s.lo), std::fabs(s.hi - u));
  INFO("the draw is " << edge << " from an edge of the token's interval");
  if (edge < kDrawMargin / 10) return;
  CHECK(got.out_tokens[0] == token);
  CHECK(std::fabs(got.out_logprobs[0] - logprob) < kDecodeTol);
}

// `g` (generated after a.tokens) against the fp32 CPU model at every position: each logprob within
// kLogprobTol of the CPU's, each draw within kDrawMargin of its token's CPU interval. Then
// `also(position, the CPU's logits there)`.
template <class Also>
void check_follows_cpu(const Checkpoint& ck, const Ask& a, const GenerationRequest& g, Also&& also) {
  REQUIRE(g.error_code() == MLPT_OK);
  REQUIRE(g.out_tokens.size() == size_t(a.max_new));
  REQUIRE(g.out_logprobs.size() == g.out_tokens.size());
  std::vector<int32_t> seq = a.tokens;
  seq.insert(seq.end(), g.out_tokens.begin(), g.out_tokens.end());
  const auto logits = cpu_logits(ck.w, seq);
  std::vector<std::vector<float>> perturbed;
  for (int seed = 0; seed < 4; ++seed) perturbed.push_back(cpu_logits(model_testing::perturbed_weights(ck.w, seed), seq));
  for (size_t j = 0; j < g.out_tokens.size(); ++j) {
    const size_t pos = a.tokens.size() + j;  // the new token's absolute position: the draw's counter
    const size_t row = (pos - 1) * size_t(ck.cfg.vocab_size);
    const float* l = logits.data() + row;
    const double u = mlpt::ref::counter_uniform(a.seed, pos);
    const Slot s = slot_of(l, ck.cfg.vocab_size, a, g.out_tokens[j]);
    double s_lp = 0, s_edge = 0;  // the fp32 model's own spread of the logprob and the interval
    for (const auto& p : perturbed) {
      const Slot o = slot_of(p.data() + row, ck.cfg.vocab_size, a, g.out_tokens[j]);
      s_lp = std::max(s_lp, std::fabs(o.logprob - s.logprob));
      s_edge = std::max({s_edge, std::fabs(o.lo - s.lo), std::fabs(o.hi - s.hi)});
    }
    INFO("position " << pos << ": token " << g.out_tokens[j] << ", draw " << u << ", CPU interval [" << s.lo << ", "
                     << s.hi << "); the fp32 model's own spread: logprob " << s_lp << ", interval " << s_edge);
    CHECK(std::fabs(g.out_logprobs[j] - s.logprob) < kLogprobTol + 4 * s_lp);
    CHECK((u >= s.lo - kDrawMargin - 4 * s_edge && u < s.hi + kDrawMargin + 4 * s_edge));
    also(pos, l);
  }
}

// Settings with a KV pool of `blocks` blocks of 8 tokens.
std::string kv_pool_settings(const Checkpoint& ck, int64_t blocks) {
  const size_t per_block = mlpt::ref::dev::KvCache::bytes_per_block(ck.cfg, 8);
  return ck.settings(R"(, "kv_block_size": 8, "kv_cache_bytes": )" + std::to_string(size_t(blocks) * per_block));
}

// A group: `n` requests of one prompt, seeds first_seed, first_seed + 1, ...
std::vector<Ask> group_of(const std::vector<int32_t>& prompt, size_t n, uint64_t first_seed, int32_t max_new) {
  std::vector<Ask> group(n);
  for (size_t i = 0; i < n; ++i) {
    group[i].tokens = prompt;
    group[i].seed = first_seed + i;
    group[i].max_new = max_new;
  }
  return group;
}

}  // namespace

TEST_CASE("qwen35_cuda engine: tokens and logprobs follow the CPU model's distribution and qwen35_cpu's draws") {
  REQUIRE(have_gpu());
  Checkpoint ck;
  mlpt::ref::CpuEngine cpu(ck.settings());
  mlpt::ref::cuda::CudaEngine gpu(ck.settings(R"(, "kv_block_size": 8)"));
  std::mt19937_64 rng(3);
  std::vector<Ask> asks;
  for (auto [len, t, p, k] : std::vector<std::tuple<int, float, float, int>>{
           {5, 1.f, 1.f, 0}, {40, 1.f, 1.f, 0}, {70, 0.8f, 0.9f, 0}, {130, 1.2f, 1.f, 0}, {21, 1.f, 1.f, 7}}) {
    Ask a;
    a.tokens = random_prompt(rng, len, ck.cfg.vocab_size);
    a.temperature = t, a.top_p = p, a.top_k = k;
    a.seed = 100 + asks.size();
    a.max_new = 24;
    asks.push_back(a);
  }
  const auto got = run(gpu, asks), ref = run(cpu, asks);
  int64_t same = 0, total = 0;
  for (size_t q = 0; q < asks.size(); ++q) {
    const Ask& a = asks[q];
    const GenerationRequest& g = *got[q];
    INFO("request " << q << " (prompt " << a.tokens.size() << ", T " << a.temperature << ", top_p " << a.top_p
                    << ", top_k " << a.top_k << ")");
    const mlpt::ref::SamplingParams sp{a.temperature, a.top_p, a.top_k, a.seed};
    bool same_prefix = true;
    check_follows_cpu(ck, a, g, [&](size_t pos, const float* l) {
      // What the CPU draws after the same tokens: until the first position where that differs
      // (the logits disagree across an interval edge), qwen35_cpu's tokens are the GPU's.
      const size_t j = pos - a.tokens.size();
      const int32_t cpu_pick = mlpt::ref::sample_token(l, ck.cfg.vocab_size, sp, pos).token;
      same += cpu_pick == g.out_tokens[j];
      ++total;
      if (!same_prefix) return;
      REQUIRE(ref[q]->out_tokens.size() > j);
      CHECK(ref[q]->out_tokens[j] == cpu_pick);
      same_prefix = cpu_pick == g.out_tokens[j];
    });
  }
  INFO("GPU tokens equal to the CPU's draw after the same prefix: " << same << " of " << total);
  CHECK(same >= total * 6 / 10);  // a flat 300-id distribution: bf16 moves some draws across an edge
}

TEST_CASE("qwen35_cuda engine: decode equals prefill, sessions continue, weights load from host and device") {
  REQUIRE(have_gpu());
  Checkpoint ck;
  mlpt::ref::cuda::CudaEngine gpu(ck.settings(R"(, "kv_block_size": 8)"));
  std::mt19937_64 rng(4);
  Ask a;
  a.tokens = random_prompt(rng, 60, ck.cfg.vocab_size);
  a.seed = 77;
  a.max_new = 20;
  const auto decoded = run(gpu, {a})[0];
  REQUIRE(decoded->out_tokens.size() == 20);
  // The same positions reached by prefilling the decoded tokens: the same draw, so the same token.
  for (int cut : {1, 6, 19}) {
    Ask b = a;
    b.tokens.insert(b.tokens.end(), decoded->out_tokens.begin(), decoded->out_tokens.begin() + cut);
    b.max_new = 1;
    INFO("prefill of prompt + " << cut << " decoded tokens");
    check_same_draw(ck, b, *run(gpu, {b})[0], decoded->out_tokens[cut], decoded->out_logprobs[cut]);
  }
  // A session's second turn (state kept on the device) draws what a fresh request of the whole
  // text draws.
  Ask turn1 = a;
  turn1.session = 9;
  const auto t1 = run(gpu, {turn1})[0];
  CHECK(t1->out_tokens == decoded->out_tokens);  // the same computation
  Ask turn2 = turn1;
  turn2.tokens.insert(turn2.tokens.end(), t1->out_tokens.begin(), t1->out_tokens.end());
  turn2.tokens.push_back(5);
  turn2.max_new = 1;
  const auto t2 = run(gpu, {turn2})[0];
  Ask fresh = turn2;
  fresh.session = 0;
  INFO("second turn of a session against a fresh request");
  check_same_draw(ck, turn2, *run(gpu, {fresh})[0], t2->out_tokens.at(0), t2->out_logprobs.at(0));
  gpu.session_release(9);

  // Host tensors of other weights: the engine then generates as one started from them.
  const Weights<float> other = bf16_exact_weights(ck.cfg, 14);
  const std::string other_path = (ck.dir.path / "other").string();
  mlpt::ref::save_checkpoint(other_path, other, mlpt::ref::Dtype::f32);
  std::vector<std::vector<int64_t>> shapes;
  Weights<float> other_copy = other;
  auto host = mlpt::ref::export_named_tensors(other_copy, shapes);
  gpu.pause();
  mlpt_load_weights_args la{};
  la.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
  la.tensors = host.data();
  la.num_tensors = host.size();
  la.version = 1;
  gpu.load_weights(la);
  gpu.resume();
  const auto after = run(gpu, {a})[0];
  CHECK(after->out_weight_version == 1);
  {
    mlpt::ref::cuda::CudaEngine cold(R"({"checkpoint": ")" + other_path + R"(", "max_step_tokens": 48, "kv_block_size": 8})");
    CHECK(run(cold, {a})[0]->out_tokens == after->out_tokens);
  }
  // The CUDA trainer's export (fp32 masters in device memory) of the first checkpoint: back to the
  // first weights, copied device to device.
  mlpt::ref::cuda::CudaTrainer trainer(R"({"checkpoint": ")" + ck.path + R"("})");
  mlpt_export_weights_args ex{};
  ex.struct_size = MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE;
  trainer.export_weights(ex);
  REQUIRE(ex.out_num_tensors > 0);
  REQUIRE(ex.out_tensors[0].tensor.device.device_type == kDLCUDA);
  gpu.pause();
  la.tensors = ex.out_tensors;
  la.num_tensors = ex.out_num_tensors;
  la.ready = &ex.out_ready;  // the trainer's readiness, passed on as the host does
  la.version = 2;
  gpu.load_weights(la);
  gpu.resume();
  const auto back = run(gpu, {a})[0];
  CHECK(back->out_weight_version == 2);
  CHECK(back->out_tokens == decoded->out_tokens);
}

TEST_CASE("qwen35_cuda engine: a group's shared prompt is prefilled once, the members follow the CPU model, experts recorded") {
  REQUIRE(have_gpu());
  Checkpoint ck;
  // The prompt (100 tokens) prefills over three steps; the group's other members wait for it and
  // continue from copies of the leader's state (device GDN state and KV blocks).
  mlpt::ref::cuda::CudaEngine gpu(ck.settings(R"(, "kv_block_size": 8)"));
  mlpt::ref::cuda::CudaEngine cold(ck.settings(R"(, "kv_block_size": 8, "prefix_cache_bytes": 0)"));
  std::mt19937_64 rng(6);
  const std::vector<int32_t> prompt = random_prompt(rng, 100, ck.cfg.vocab_size);
  std::vector<Ask> group = group_of(prompt, 4, 200, 8);
  for (Ask& a : group) a.record = true;
  const auto members = run(gpu, group);
  const size_t L = size_t(ck.cfg.num_moe_layers()), k = size_t(ck.cfg.experts_per_token);
  const size_t positions = prompt.size() + 8;  // the prompt and every sampled token (the last one fed to record it)
  int64_t agree = 0, entries = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    INFO("member " << i);
    check_follows_cpu(ck, group[i], *members[i], [](size_t, const float*) {});
    // Routed experts for every position, the cached prompt's included (the leader's record travels
    // with the prefix), equal to a cold engine's up to bf16 near-ties of the router.
    const auto alone = run(cold, {group[i]})[0];
    const auto& got = members[i]->out_routed_experts;
    REQUIRE(got.size() == L);
    REQUIRE(alone->out_routed_experts.size() == L);
    for (size_t l = 0; l < L; ++l) {
      REQUIRE(got[l].size() == positions * k);
      REQUIRE(alone->out_routed_experts[l].size() == positions * k);
      for (size_t e = 0; e < got[l].size(); ++e) {
        REQUIRE(got[l][e] >= 0);
        REQUIRE(got[l][e] < ck.cfg.num_experts);
        // The prompt's part: the same computation as the cold engine's (the same prefill steps)
        // until the sampled tokens, which may differ.
        if (e < (prompt.size() - 1) * k) agree += got[l][e] == alone->out_routed_experts[l][e], ++entries;
      }
    }
  }
  INFO("prompt routing entries equal to a cold engine's: " << agree << " of " << entries);
  CHECK(agree >= entries * 99 / 100);
}

TEST_CASE("qwen35_cuda engine: a group's members share the prompt's filled KV blocks") {
  REQUIRE(have_gpu());
  Checkpoint ck;
  // A 30-token prompt in blocks of 8: 3 full blocks and a partial one. The leader, the cached
  // prefix and 3 more members each hold the 3 full blocks shared and a partial block of their own:
  // 8 blocks (with 2 new tokens each, 31 positions still fit in 4 blocks). Copies would need 20.
  mlpt::ref::cuda::CudaEngine gpu(kv_pool_settings(ck, 12));
  std::mt19937_64 rng(7);
  const std::vector<Ask> group = group_of(random_prompt(rng, 30, ck.cfg.vocab_size), 4, 300, 2);
  const auto members = run(gpu, group);
  for (size_t i = 0; i < group.size(); ++i) {
    INFO("member " << i << ": " << members[i]->error_message());
    CHECK(members[i]->error_code() == MLPT_OK);
    check_follows_cpu(ck, group[i], *members[i], [](size_t, const float*) {});
  }
}

TEST_CASE("qwen35_cuda engine: an exhausted KV pool fails the request with a clear error, and frees its blocks") {
  REQUIRE(have_gpu());
  Checkpoint ck;
  // Blocks of 8 tokens; the pool holds 4 of them (32 positions).
  mlpt::ref::cuda::CudaEngine gpu(kv_pool_settings(ck, 4));
  std::mt19937_64 rng(5);
  Ask big;
  big.tokens = random_prompt(rng, 40, ck.cfg.vocab_size);
  const auto failed = run(gpu, {big})[0];
  CHECK(failed->error_code() == MLPT_RESOURCE_EXHAUSTED);
  CHECK(failed->error_message().find("KV cache") != std::string::npos);
  Ask small = big;
  small.tokens.resize(10);
  small.max_new = 8;
  const auto ok = run(gpu, {small})[0];  // the failed request's blocks are back in the pool
  CHECK(ok->error_code() == MLPT_OK);
  CHECK(ok->out_tokens.size() == 8);
}
