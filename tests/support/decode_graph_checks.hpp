// Recorded decode steps (device_model/decode_graphs.hpp) against the engine's unrecorded step
// (generate_step), for any backend: the GPU records them as CUDA graphs
// (tests/reference_cuda/backends/cuda/decode_graphs_test.cpp); the CPU, which cannot record, runs
// the same staging and padding unrecorded (tests/reference_cuda/model/decode_graphs_test.cpp).
// Both sides take the device-sized expert forms (WorkRecorder::set_recordable), so they compute
// one function in one order: results are compared bit for bit. Catch assertions.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "device_model/decode_graphs.hpp"
#include "device_model/generate.hpp"
#include "device_model_fixtures.hpp"
#include "mlpt/sdk/engine.hpp"
#include "model/named_tensors.hpp"

namespace model_testing {

namespace dev = mlpt::ref::dev;

// What one decode step gave every sequence.
struct DecodeOut {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int16_t> routing;  // [sequences, layers, k]
};

// Sequences decoded one token per step, by generate_step or by a DecodeGraphs.
class DecodeSessions {
 public:
  DecodeSessions(mlpt::ref::Ops& ops, dev::KvBlockPool& pool) : ops_(ops), pool_(pool) {}
  ~DecodeSessions() {
    for (auto& s : states_) pool_.release(s->blocks);
  }
  DecodeSessions(const DecodeSessions&) = delete;
  DecodeSessions& operator=(const DecodeSessions&) = delete;

  // Prompts run as one packed prefill (chunked GDN); each sequence's next token is its draw.
  void prefill(const dev::DeviceWeights& w, const std::vector<std::vector<int32_t>>& prompts) {
    dev::DeviceBatch b;
    dev::SampleRows rows;
    for (const auto& p : prompts) {
      states_.push_back(std::make_unique<dev::DeviceSequenceState>(ops_, w.config));
      pool_.reserve(states_.back()->blocks, static_cast<int64_t>(p.size()));
      b.tokens.insert(b.tokens.end(), p.begin(), p.end());
      b.offsets.push_back(static_cast<int64_t>(b.tokens.size()));
      b.states.push_back(states_.back().get());
      rows.segment.push_back(rows.segment.size());
      rows.params.push_back(params(rows.segment.size() - 1, static_cast<int64_t>(p.size())));
      rows.host_logits.push_back(false);
    }
    b.kv = &pool_.cache();
    auto ws = dev::make_workspace();
    dev::StepScratch scratch;
    dev::RecordableForms forms(ops_);
    next_ = dev::generate_step(ops_, w, b, rows, w.config.vocab_size, *ws, scratch).tokens;
  }

  // One token per sequence (`only`: the first `only` sequences), by generate_step or by `graphs`.
  DecodeOut step(const dev::DeviceWeights& w, dev::DecodeGraphs* graphs, size_t only = SIZE_MAX) {
    const size_t n = std::min(only, states_.size());
    const ModelConfig& c = w.config;
    dev::DeviceBatch b;
    dev::SampleRows rows;
    DecodeOut out;
    out.routing.resize(n * size_t(c.num_layers * c.experts_per_token));
    for (size_t s = 0; s < n; ++s) {
      dev::DeviceSequenceState& st = *states_[s];
      pool_.reserve(st.blocks, st.length + 1);
      b.tokens.push_back(next_[s]);
      b.offsets.push_back(static_cast<int64_t>(s + 1));
      b.states.push_back(&st);
      rows.segment.push_back(s);
      rows.params.push_back(params(s, st.length));
      rows.host_logits.push_back(false);
    }
    b.kv = &pool_.cache();
    b.chunked = false;
    b.routed_experts = out.routing.data();
    dev::StepResult r;
    if (graphs) {
      r = graphs->step(w, b, rows, c.vocab_size);
    } else {
      dev::RecordableForms forms(ops_);
      r = dev::generate_step(ops_, w, b, rows, c.vocab_size, ws_ ? *ws_ : *(ws_ = dev::make_workspace()),
                             scratch_);
    }
    for (size_t s = 0; s < n; ++s) next_[s] = r.tokens[s];
    out.tokens = r.tokens;
    out.logprobs = r.logprobs;
    return out;
  }

  // The most KV blocks any of the first `only` sequences holds after the next step's reservation.
  int64_t blocks_next_step(size_t only = SIZE_MAX) const {
    int64_t most = 1;
    for (size_t s = 0; s < std::min(only, states_.size()); ++s)
      most = std::max(most, (states_[s]->length + 1 + pool_.block_size() - 1) / pool_.block_size());
    return most;
  }

 private:
  // Seeded draws at temperature 0.9, top-p 0.95: a defect moves a draw, not only a logprob.
  static mlpt::ref::SamplingRow params(size_t sequence, int64_t position) {
    return {0.9f, 0.95f, 17 + sequence, static_cast<uint64_t>(position)};
  }
  mlpt::ref::Ops& ops_;
  dev::KvBlockPool& pool_;
  std::vector<std::unique_ptr<dev::DeviceSequenceState>> states_;
  std::vector<int32_t> next_;
  dev::WorkspacePtr ws_;
  dev::StepScratch scratch_;
};

// Prompts of lengths that start in different KV blocks and cross block boundaries while decoding.
inline std::vector<std::vector<int32_t>> decode_prompts(const ModelConfig& c, std::vector<int64_t> lengths,
                                                        uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int64_t n : lengths) out.push_back(random_tokens(rng, n, c.vocab_size));
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows [0, n) of `got` against `want`, bit for bit.
inline void check_same_rows(const DecodeOut& got, const DecodeOut& want, size_t n, const ModelConfig& c,
                            int step) {
  INFO("decode step " << step);
  const size_t per = size_t(c.num_layers * c.experts_per_token);
  REQUIRE(got.tokens.size() >= n);
  REQUIRE(want.tokens.size() >= n);
  CHECK(std::vector<int32_t>(got.tokens.begin(), got.tokens.begin() + long(n)) ==
        std::vector<int32_t>(want.tokens.begin(), want.tokens.begin() + long(n)));
  CHECK(same_bits(std::vector<float>(got.logprobs.begin(), got.logprobs.begin() + long(n)),
                  std::vector<float>(want.logprobs.begin(), want.logprobs.begin() + long(n))));
  CHECK(std::vector<int16_t>(got.routing.begin(), got.routing.begin() + long(n * per)) ==
        std::vector<int16_t>(want.routing.begin(), want.routing.begin() + long(n * per)));
}

// A model, its KV pool and a runner with buckets up to 8, the same prompts prefilled for each side.
struct TwoSides {
  ModelConfig c = small_config();
  dev::DeviceWeights w;
  dev::KvBlockPool pool;
  DecodeSessions eager, recorded;
  dev::DecodeGraphs graphs;
  TwoSides(mlpt::ref::Ops& ops, uint64_t weight_seed, const std::vector<int64_t>& lengths,
           uint64_t prompt_seed)
      : w(dev::upload_weights(ops, bf16_exact_weights(c, weight_seed))),
        pool(ops, c, 64, 8),
        eager(ops, pool),
        recorded(ops, pool),
        graphs(ops, c, pool, 8) {
    const auto prompts = decode_prompts(c, lengths, prompt_seed);
    eager.prefill(w, prompts);
    recorded.prefill(w, prompts);
  }
};

// Four sequences (a full bucket) decoded 12 steps by generate_step and by DecodeGraphs: every draw,
// logprob and routing record equal bit for bit. A sequence crosses from 4 to 5 KV blocks on the
// way, which widens the block table (4 → 8): its bucket is recorded again once. With a recorder the
// other steps replay; without one every step runs unrecorded.
inline void check_recorded_decode_equals_eager(mlpt::ref::Ops& ops) {
  TwoSides t(ops, 5, {5, 9, 17, 30}, 3);
  const int steps = 12;
  int64_t widths = 0, last_width = 0;
  for (int i = 0; i < steps; ++i) {
    const int64_t width = dev::table_width(t.recorded.blocks_next_step());
    widths += width != last_width;
    last_width = width;
    const DecodeOut want = t.eager.step(t.w, nullptr);
    check_same_rows(t.recorded.step(t.w, &t.graphs), want, 4, t.c, i);
  }
  REQUIRE(widths == 2);  // the prompts were chosen to cross one power of two of blocks
  const auto& st = t.graphs.stats();
  INFO("a recording the backend refused: " << st.failure);
  CHECK(st.failed == 0);
  CHECK(st.recorded == widths);
  CHECK(st.invalidated == widths - 1);
  if (ops.recorder()) {
    CHECK(st.unrecorded == widths);
    CHECK(st.replayed == steps - widths);
  } else {
    CHECK(st.unrecorded == steps);
    CHECK(st.replayed == 0);
  }
}

// Three sequences in the bucket of four: the pad row (the runner's own sequence) changes none of
// them. Each real row equals its row in a full batch of four computed unrecorded (same shapes, so
// same kernels; rows are independent), at every step, so the pad never wrote their state or KV.
inline void check_partial_bucket(mlpt::ref::Ops& ops) {
  TwoSides t(ops, 6, {7, 12, 20, 3}, 8);  // eager: all four; recorded: the first three
  for (int i = 0; i < 6; ++i) {
    const DecodeOut want = t.eager.step(t.w, nullptr);
    const DecodeOut got = t.recorded.step(t.w, &t.graphs, 3);
    REQUIRE(got.tokens.size() == 3);
    check_same_rows(got, want, 3, t.c, i);
  }
  INFO("a recording the backend refused: " << t.graphs.stats().failure);
  CHECK(t.graphs.stats().failed == 0);
  CHECK(t.graphs.stats().recorded == 1);
}

// A refit between decode steps, then new sessions: the case where recordings that baked in the
// GDN state buffers of the sessions they were made with decode garbage. In place (the weights'
// buffers written, addresses kept) every recording stays valid and reads the new weights; a refit
// that reallocates the weights invalidates every recording, which is made again. Either way new
// sessions (new GDN states and conv windows, new KV blocks) decode exactly as generate_step does
// under the new weights, and differently from the old weights.
inline void check_decode_after_refit(mlpt::ref::Ops& ops) {
  const ModelConfig c = small_config();
  dev::DeviceWeights w = dev::upload_weights(ops, bf16_exact_weights(c, 11));
  dev::KvBlockPool pool(ops, c, 96, 8);
  dev::DecodeGraphs graphs(ops, c, pool, 4);
  const auto prompts = decode_prompts(c, {6, 10, 12, 9}, 12);  // 2 KV blocks throughout
  std::vector<float> before;  // the first step's logprobs under the first weights
  {
    DecodeSessions eager(ops, pool), recorded(ops, pool);
    eager.prefill(w, prompts);
    recorded.prefill(w, prompts);
    for (int i = 0; i < 3; ++i) {
      const DecodeOut want = eager.step(w, nullptr);
      check_same_rows(recorded.step(w, &graphs), want, 4, c, i);
      if (i == 0) before = want.logprobs;
    }
  }  // the sessions end: their states are freed
  REQUIRE(graphs.stats().recorded == 1);

  // New sessions under `now`; returns their first step's logprobs, which must differ from
  // `previous` (the same prompts' under the weights before the refit).
  auto decode_new_sessions = [&](const dev::DeviceWeights& now, const std::vector<float>& previous,
                                 const char* refit) {
    INFO("after a refit " << refit);
    DecodeSessions eager(ops, pool), recorded(ops, pool);
    eager.prefill(now, prompts);
    recorded.prefill(now, prompts);
    std::vector<float> first;
    for (int i = 0; i < 4; ++i) {
      const DecodeOut want = eager.step(now, nullptr);
      check_same_rows(recorded.step(now, &graphs), want, 4, c, i);
      if (i == 0) first = want.logprobs;
    }
    CHECK_FALSE(same_bits(first, previous));
    return first;
  };

  // In place: the new values written into the buffers the recordings read.
  const dev::DeviceWeights next = dev::upload_weights(ops, bf16_exact_weights(c, 12));
  for (size_t i = 0; i < w.tensors.size(); ++i)
    ops.copy(w.tensors[i].get(), next.tensors[i].get(), next.tensors[i].bytes());
  ops.synchronize();
  before = decode_new_sessions(w, before, "in place");
  CHECK(graphs.stats().invalidated == 0);
  CHECK(graphs.stats().recorded == 1);

  // Reallocating: new buffers (the old ones still held while they are made, as a load does).
  dev::DeviceWeights third = dev::upload_weights(ops, bf16_exact_weights(c, 13));
  std::swap(w, third);
  third = dev::DeviceWeights{};
  decode_new_sessions(w, before, "into new buffers");
  CHECK(graphs.stats().invalidated == 1);
  CHECK(graphs.stats().recorded == 2);
  INFO("a recording the backend refused: " << graphs.stats().failure);
  CHECK(graphs.stats().failed == 0);
}

// Four requests submitted while `e` is paused (one step prefills them all), prompts of 5 to 14
// tokens, 12 new tokens each: every decode step is a full bucket of four, so an engine with decode
// graphs and one without compute the same shapes in every step.
inline std::vector<std::shared_ptr<mlpt::sdk::GenerationRequest>> generate_four(mlpt::sdk::Engine& e,
                                                                                uint64_t seed,
                                                                                int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::shared_ptr<mlpt::sdk::GenerationRequest>> out;
  uint64_t id = 1;
  e.pause();
  for (int64_t n : {5, 9, 14, 7}) {
    auto r = std::make_shared<mlpt::sdk::GenerationRequest>();
    r->id = id++;
    r->tokens = random_tokens(rng, n, vocab);
    r->sampling.struct_size = MLPT_SAMPLING_PARAMS_STRUCT_SIZE;
    r->sampling.temperature = 0.9f;
    r->sampling.top_p = 0.95f;
    r->sampling.seed = seed + id;
    r->max_new_tokens = 12;
    r->record_routed_experts = true;
    out.push_back(r);
    e.submit(r);
  }
  e.resume();
  for (auto& r : out) r->wait();
  return out;
}

// An engine with cuda_graphs = "decode" and one with "off" (`settings(graphs)` makes each one's
// settings; Engine takes them) generate the same tokens, logprobs and routing bit for bit, before
// and after a load of host tensors (which gives both new weight buffers: the graphs' key changes).
template <class Engine, class Settings>
void check_engine_with_and_without_graphs(const ModelConfig& cfg, Settings&& settings) {
  Engine off(settings("off")), on(settings("decode"));
  auto same = [](const auto& got, const auto& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("request " << i);
      REQUIRE(got[i]->error_code() == MLPT_OK);
      REQUIRE(want[i]->error_code() == MLPT_OK);
      CHECK(got[i]->out_tokens.size() == 12);
      CHECK(got[i]->out_tokens == want[i]->out_tokens);
      CHECK(same_bits(got[i]->out_logprobs, want[i]->out_logprobs));
      CHECK(got[i]->out_routed_experts == want[i]->out_routed_experts);
    }
  };
  same(generate_four(on, 5, cfg.vocab_size), generate_four(off, 5, cfg.vocab_size));
  Weights<float> next = bf16_exact_weights(cfg, 22);
  std::vector<std::vector<int64_t>> shapes;
  auto host = mlpt::ref::export_named_tensors(next, shapes);
  for (Engine* e : {&off, &on}) {
    e->pause();
    mlpt_load_weights_args la{};
    la.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
    la.tensors = host.data();
    la.num_tensors = host.size();
    la.version = 1;
    e->load_weights(la);
    e->resume();
  }
  const auto without = generate_four(off, 6, cfg.vocab_size);
  same(generate_four(on, 6, cfg.vocab_size), without);
  CHECK(without[0]->out_weight_version == 1);
}

}  // namespace model_testing
