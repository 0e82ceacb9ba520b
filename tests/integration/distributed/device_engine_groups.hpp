// The device engine (engine/device_backend.hpp) as a model-parallel engine group, for qwen35_cuda
// (TP=2, EP=2 and TP=2 × EP=2 ranks sharing one GPU: tests/reference_cuda/backends/cuda/parallel_engine_test)
// and qwen35_bf16 (the same code on the CPU: tests/integration/distributed/distributed_test): the
// tensor-parallel sums over host-staged MPI, routed experts by host-staged dispatch,
// started by mpirun as dist_peer ranks on two checkpoints of the tiny config
// (tests/integration/distributed/engine_runs.hpp), generate greedily (top_k 1: sessions, a shared
// prompt through the prefix cache), take part in refused loads, fetch checkpoint B as their shard
// boxes cut by the in-process transport (the sharded refit), generate again, load A's whole
// tensors and generate a third time. The same script runs on the engine alone on one rank and on the
// qwen35_cpu engine group of the same layout, and every greedy token of the three is held to the
// fp32 CPU model's logits after the same tokens (the weights of its phase), computed here.
//
// Tolerances, stated (the test prints the values; on qwen35_bf16 measured 0 shortfall, 16 and 18 of
// 18 generations equal under TP=2 and EP=2; not yet measured on a GPU): every bf16 token (group or
// one rank) within 0.1 of the CPU model's largest logit at its position (bf16 weights and
// activations move logprobs by up to 0.05; TP rounds its partial sums once more, EP computes each
// expert's rows apart), every CPU group token within 1e-4 of it (fp32 sums in another order). So
// wherever the CPU's best logit leads by more than 0.2 all three pick the same token; where the
// bf16 group's tokens first differ from the engine alone's or the CPU group's, the CPU logits of the
// two tokens are within 0.2 (a near-tie that rounding may tip either way). Each bf16 bound is widened by
// 4x the fp32 model's own spread of the same logit difference under 2^-9 weight perturbations
// (tests/support/device_model_fixtures.hpp): the tiny model has ill-conditioned positions where
// fp32 itself moves a gap by more than bf16's estimate (the first GPU run diverged at a gap of 0.247).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "device_model_fixtures.hpp"
#include "engine_runs.hpp"
#include "model/model.hpp"

namespace dist_test {

using model_testing::cpu_logits;
using nlohmann::json;

inline constexpr double kCudaShortfall = 0.1, kCpuShortfall = 1e-4, kNearTie = 2 * kCudaShortfall;

// Greedy requests only: a plain prompt, a longer one (prefill over several GDN chunks), two sharing
// a prompt (the prefix cache copies a state on every rank), a session and its second turn.
inline json greedy_requests() {
  std::vector<int32_t> longer, shared{4, 9, 16, 25, 36, 12, 3, 8, 1, 30, 22};
  for (int i = 0; i < 70; ++i) longer.push_back((i * 37 + 11) % 1000);
  return {{"requests",
           {{{"name", "plain"},
             {"id", 1},
             {"tokens", {1, 2, 3, 4, 5, 6, 7}},
             {"top_k", 1},
             {"max_new_tokens", 8}},
            {{"name", "longer"}, {"id", 2}, {"tokens", longer}, {"top_k", 1}, {"max_new_tokens", 8}},
            {{"name", "shared_a"}, {"id", 3}, {"tokens", shared}, {"top_k", 1}, {"max_new_tokens", 6}},
            {{"name", "shared_b"}, {"id", 4}, {"tokens", shared}, {"top_k", 1}, {"max_new_tokens", 6}},
            {{"name", "session"},
             {"id", 5},
             {"session", 7},
             {"tokens", {11, 13, 17, 19, 23}},
             {"top_k", 1},
             {"max_new_tokens", 5}}}},
          {"second_turn",
           {{"of", "session"}, {"id", 6}, {"extra", {3, 5, 7}}, {"top_k", 1}, {"max_new_tokens", 5}}}};
}

// The prompt a run's request `name` had (a second turn continues the run's own first turn).
inline std::vector<int32_t> prompt_of(const json& script, const json& run_phase, const std::string& name) {
  const json& turn = script["second_turn"];
  const std::string of = name == "second_turn" ? turn["of"].get<std::string>() : name;
  std::vector<int32_t> p;
  for (const json& r : script["requests"])
    if (r["name"] == of) p = r["tokens"].get<std::vector<int32_t>>();
  if (name != "second_turn") return p;
  for (int32_t t : run_phase[of]["tokens"]) p.push_back(t);
  for (int32_t t : turn["extra"]) p.push_back(t);
  return p;
}

// How a run's greedy tokens sit in the CPU model's logits after the same tokens.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;                  // per generated position, [V]
  std::vector<std::vector<std::vector<float>>> perturbed;  // per position, per perturbation, [V]
  double shortfall = 0;      // the largest (best logit − the chosen token's) beyond 4x its own spread
  double raw_shortfall = 0;  // the largest (best logit − the chosen token's)
  // How far the fp32 model itself moves logit[a] − logit[b] at position j under the perturbations.
  double spread(size_t j, int32_t a, int32_t b) const {
    double s = 0;
    for (const auto& p : perturbed[j])
      s = std::max(s, std::fabs(double(p[size_t(a)] - p[size_t(b)]) -
                                double(logits[j][size_t(a)] - logits[j][size_t(b)])));
    return s;
  }
};

inline Greedy follow_cpu(const mlpt::ref::Weights<float>& w, std::vector<int32_t> seq,
                         const json& generated) {
  Greedy g;
  g.tokens = generated.get<std::vector<int32_t>>();
  const size_t prompt = seq.size();
  seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
  seq.pop_back();  // nothing follows the last token
  const auto logits = cpu_logits(w, seq);
  std::vector<std::vector<float>> others;
  for (int seed = 0; seed < 4; ++seed)
    others.push_back(cpu_logits(model_testing::perturbed_weights(w, seed), seq));
  const size_t V = size_t(w.config.vocab_size);
  for (size_t j = 0; j < g.tokens.size(); ++j) {
    const float* l = logits.data() + (prompt - 1 + j) * V;
    g.logits.emplace_back(l, l + V);
    g.perturbed.emplace_back();
    for (const auto& o : others)
      g.perturbed.back().emplace_back(o.begin() + long((prompt - 1 + j) * V),
                                      o.begin() + long((prompt + j) * V));
    const int32_t best = int32_t(std::max_element(l, l + V) - l);
    g.shortfall =
        std::max(g.shortfall, double(l[best] - l[g.tokens[j]]) - 4 * g.spread(j, best, g.tokens[j]));
    g.raw_shortfall = std::max(g.raw_shortfall, double(l[best] - l[g.tokens[j]]));
  }
  return g;
}

// Where `a` and `b` first differ (their prefixes agree, so the CPU logits there are the same): the
// CPU's logit gap between their two tokens; -1 when one is a prefix of the other.
// The gap is less 4x its own spread (Greedy::spread).
inline double gap_at_divergence(const Greedy& a, const Greedy& b, size_t& at) {
  for (at = 0; at < std::min(a.tokens.size(), b.tokens.size()); ++at)
    if (a.tokens[at] != b.tokens[at])
      return std::fabs(double(a.logits[at][a.tokens[at]]) - a.logits[at][b.tokens[at]]) -
             4 * a.spread(at, a.tokens[at], b.tokens[at]);
  return -1;
}

// A CUDA engine group of tp × ep ranks on one GPU against one CUDA engine and the CPU group of the
// same layout, on the greedy script.
inline void check_device_engine_group(const std::string& engine, int tp, int ep) {
  TempDir dir(engine + "_engine_group");
  const json config = json::parse(std::ifstream(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json"));
  const std::string a = engine_checkpoints(dir, config, greedy_requests());
  const json script = json::parse(std::ifstream(dir / "script.json"));
  const json layout = {{"checkpoint", a}, {"tensor_parallel", tp}, {"expert_parallel", ep}};
  const int ranks = tp * ep;
  const json one = run_engines(dir, 1, {{"checkpoint", a}}, "device_one", engine)[0];
  const json group = run_engines(dir, ranks, layout, "device_group", engine);
  const json cpu = run_engines(dir, ranks, layout, "cpu_group", "qwen35_cpu")[0];
  INFO("one " << engine << " engine: " << one.dump() << "\n"
              << engine << " group: " << group.dump() << "\nCPU group: " << cpu.dump());
  REQUIRE_FALSE(one.contains("error"));
  REQUIRE_FALSE(cpu.contains("error"));

  const mlpt::ref::Weights<float> weights_a = mlpt::ref::load_weights<float>(dir / "a"),
                                  weights_b = mlpt::ref::load_weights<float>(dir / "b");
  const std::map<std::string, const mlpt::ref::Weights<float>*> phases = {
      {"before", &weights_a}, {"after", &weights_b}, {"again", &weights_a}};
  double worst_group = 0, worst_one = 0, worst_cpu = 0;
  int identical_one = 0, identical_cpu = 0, compared = 0;
  bool refit_changed = false;
  for (const auto& [phase, w] : phases) {
    for (const auto& [name, want] : one[phase].items()) {
      INFO(phase << " " << name);
      const json& got = group[0][phase][name];
      CHECK(got["version"] == want["version"]);
      CHECK(got["finish"] == want["finish"]);
      const Greedy g = follow_cpu(*w, prompt_of(script, group[0][phase], name), got["tokens"]);
      const Greedy o = follow_cpu(*w, prompt_of(script, one[phase], name), want["tokens"]);
      const Greedy c = follow_cpu(*w, prompt_of(script, cpu[phase], name), cpu[phase][name]["tokens"]);
      worst_group = std::max(worst_group, g.shortfall);
      worst_one = std::max(worst_one, o.shortfall);
      worst_cpu = std::max(worst_cpu, c.raw_shortfall);
      CHECK(g.shortfall <= kCudaShortfall);
      CHECK(o.shortfall <= kCudaShortfall);
      CHECK(c.raw_shortfall <= kCpuShortfall);  // fp32 against fp32: no allowance for spread
      for (const auto& [other, count] : {std::pair{&o, &identical_one}, std::pair{&c, &identical_cpu}}) {
        size_t at = 0;
        const double gap = gap_at_divergence(g, *other, at);
        INFO("first differs at generated position " << at << ", CPU logit gap " << gap);
        CHECK(gap <= kNearTie);
        *count += gap < 0 && g.tokens.size() == other->tokens.size();
      }
      ++compared;
      if (phase == "after") refit_changed |= want["tokens"] != one["before"][name]["tokens"];
    }
  }
  CHECK(compared == 18);  // six generations in each of the three phases
  CHECK(refit_changed);   // checkpoint B's weights were in use after the refit
  for (int rank = 0; rank < ranks; ++rank) {
    const json& r = group[rank];
    INFO("rank " << rank);
    REQUIRE_FALSE(r.contains("error"));
    CHECK(r["shards"].get<int>() > 0);  // its shard boxes (weight_shards)
    CHECK(r["weight_version"] == 1);
    CHECK(r["fetched"] == 1);
    CHECK_THAT(r["mismatch"]["message"].get<std::string>(),
               Catch::Contains("rank 1 refused to load version 1"));
    CHECK(r["version_after_mismatch"] == 0);  // no rank loaded
    CHECK_THAT(r["missing_shard"]["message"].get<std::string>(), Catch::Contains("is missing"));
    // The refit brought each rank its shard boxes only.
    CHECK(r["received_bytes"].get<double>() > 0);
    CHECK(r["received_bytes"].get<double>() < one["model_bytes"].get<double>());
    if (rank > 0)
      CHECK_THAT(r["follower_generate"]["message"].get<std::string>(),
                 Catch::Contains("requests go to rank 0"));
  }
  WARN(engine << " engine group TP=" << tp << " EP=" << ep << ": greedy tokens at most " << worst_group
              << " below the CPU model's best logit (one rank: " << worst_one << ", CPU group: " << worst_cpu
              << "); of " << compared << " generations " << identical_one << " equal the one-rank engine's, "
              << identical_cpu << " the CPU group's");
}

}  // namespace dist_test
