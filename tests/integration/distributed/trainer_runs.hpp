// What the distributed trainer tests share: one step of the one-rank trainer on a fixed batch (the
// reference the groups are held to), running a trainer group under mpirun (dist_peer), and
// reading back what each rank reported.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/components/instances.hpp"
#include "core/plugin/host_services.hpp"
#include "core/plugin/plugin.hpp"
#include "model_fixtures.hpp"
#include "mpirun.hpp"
#include "ops/bf16.hpp"
#include "tests/support/test_util.hpp"

namespace dist_test {

using nlohmann::json;
using mlpt_test::TempDir;

inline json rank_report(const TempDir& dir, int rank) {
  std::ifstream in(dir / ("rank" + std::to_string(rank) + ".json"));
  REQUIRE(in.good());
  return json::parse(in);
}

inline std::vector<float> read_floats(const std::string& path) {
  std::string bytes = mlpt_test::read_bytes(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Each rank's rank<r>.<extension> in `dir` (dist_peer's per-rank outputs: weights, logprobs).
inline std::vector<std::vector<float>> rank_floats(const TempDir& dir, int ranks, const std::string& extension) {
  std::vector<std::vector<float>> out;
  for (int rank = 0; rank < ranks; ++rank)
    out.push_back(read_floats(dir / ("rank" + std::to_string(rank) + "." + extension)));
  return out;
}

// One step of the one-rank trainer on a fixed batch of six sequences, and what the group runs need
// to repeat it: the checkpoint, the batch as JSON (dir/batch.json), the settings.
struct OneRankStep {
  json settings;
  std::map<std::string, double> metrics;
  uint64_t version = 0;
  std::vector<std::string> names;                       // in export order
  std::map<std::string, std::vector<float>> weights;    // after the step
  std::vector<float> flat;                              // the same, concatenated in export order
  double moved = 0;                                     // the largest change of a weight in the step
};

inline std::vector<float> exported_flat(const mlpt::components::Trainer::Weights& w, std::vector<std::string>* names = nullptr,
                                 std::map<std::string, std::vector<float>>* by_name = nullptr) {
  std::vector<float> flat;
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    int64_t n = 1;
    for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
    const float* data = static_cast<const float*>(t.data);
    flat.insert(flat.end(), data, data + n);
    const std::string name(w.tensors[i].name.data, w.tensors[i].name.size);
    if (names) names->push_back(name);
    if (by_name) (*by_name)[name].assign(data, data + n);
  }
  return flat;
}

// What else one_rank_step does: `prepare` turns the tool's checkpoint into the one trained (returns
// its folder); `optimizer`, when set, replaces the settings' optimizer; after step k (1, 2, ...) the
// one-rank trainer saves its state to saves[k - 1], stepping on the same batch until all are saved.
struct OneRankOptions {
  std::function<std::string(const std::string&)> prepare;
  json optimizer;
  std::vector<std::string> saves;
};

// A micro checkpoint of `model_config` from the model tool, and a batch whose generation logprobs
// are the trainer's own (on-policy), so nothing is masked.
inline OneRankStep one_rank_step(const TempDir& dir, const json& model_config, json extra_settings = json::object(),
                                 const OneRankOptions& options = {}) {
  const std::string config = dir / "ck.config.json", ck = dir / "ck";
  mlpt_test::write_bytes(config, model_config.dump());
  int status = 0;
  std::string log = mlpt_test::run_command(std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model init --config " + config +
                                               " --seed 31 --out " + ck + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  const std::string trained = options.prepare ? options.prepare(ck) : ck;
  OneRankStep r;
  // lr 1, eps 1, betas 0 and no clipping make the update g / (|g| + 1): the weights show the
  // gradient's size, not only its sign (AdamW's usual first step), so a rank that missed the
  // other's gradient cannot agree by accident.
  r.settings = {{"checkpoint", trained}, {"optimizer", {{"lr", 1.0}, {"eps", 1.0}, {"betas", {0.0, 0.0}}, {"grad_clip", 0}}}};
  if (!options.optimizer.is_null()) r.settings["optimizer"] = options.optimizer;
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  mlpt::components::Trainer one(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), r.settings);
  r.settings.update(extra_settings);  // for the group's ranks only

  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> advantages;
  const int lengths[] = {12, 15, 9, 11, 14, 10}, prompts[] = {4, 5, 3, 6, 4, 5};
  for (int s = 0; s < 6; ++s) {
    for (int i = 0; i < lengths[s]; ++i) {
      tokens.push_back((s + 1 + 7 * i) % 37);
      loss_mask.push_back(i >= prompts[s]);
    }
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    advantages.push_back(s % 2 ? -1.0f : 1.0f + 0.25f * s);
    truncated.push_back(0);
  }
  mlpt_train_batch batch{};
  batch.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  batch.num_sequences = advantages.size();
  batch.offsets = offsets.data(), batch.tokens = tokens.data(), batch.loss_mask = loss_mask.data();
  batch.advantages = advantages.data(), batch.truncated = truncated.data();
  std::vector<float> logprobs = one.compute_logprobs(batch);
  for (size_t i = 0; i < logprobs.size(); ++i) logprobs[i] = loss_mask[i] ? logprobs[i] : 0.0f;
  batch.generation_logprobs = logprobs.data();
  const json batch_json = {{"offsets", offsets}, {"tokens", tokens}, {"loss_mask", loss_mask}, {"truncated", truncated},
                           {"generation_logprobs", logprobs}, {"advantages", advantages}};
  mlpt_test::write_bytes(dir / "batch.json", batch_json.dump());

  for (const auto& m : one.train_step(batch, &r.version)) r.metrics[m.name] = m.value;
  r.flat = exported_flat(one.export_weights(), &r.names, &r.weights);
  // How far the step moved the weights, for scale: a rank that missed the other's gradient would
  // be off by about this much.
  mlpt::components::Trainer fresh(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), json{{"checkpoint", trained}});
  const std::vector<float> before = exported_flat(fresh.export_weights());
  for (size_t i = 0; i < before.size(); ++i) r.moved = std::max(r.moved, std::fabs(double(before[i]) - r.flat[i]));
  for (size_t k = 0; k < options.saves.size(); ++k) {
    if (k > 0) one.train_step(batch, &r.version);
    one.save_state(options.saves[k]);
  }
  return r;
}

// `actions`: dist_peer's (empty: its default, step then export).
inline Launch train_group(const TempDir& dir, int ranks, const json& settings, const std::string& trainer = "qwen35_cpu",
                          const std::string& actions = "") {
  return dist_test::mpirun(ranks, "env MLPT_TEST_TRAINER=" + trainer + " " + std::string(DIST_PEER_EXE) + " trainer " +
                                      MLPT_PLUGIN_DIR + "/libmlpt_reference.so " + dir / "batch.json" + " '" +
                                      settings.dump() + "' " + (actions.empty() ? "" : actions + " ") + dir.str());
}

// The micro model with heads that split over two tensor-parallel ranks (two KV heads, two GDN key
// heads); its four experts split over two or four expert-parallel ranks.
inline json splittable_micro_config() {
  json c = mlpt_test::micro_config_json();
  c["text_config"]["num_key_value_heads"] = 2;
  c["text_config"]["linear_num_key_heads"] = 2;
  return c;
}

// The micro model with the 397B model's head proportions at TP4: four query heads over two KV
// heads (each replicated on two tensor-parallel ranks), four GDN key and value heads.
inline json kv_replicating_micro_config() {
  json c = splittable_micro_config();
  c["text_config"]["num_attention_heads"] = 4;
  c["text_config"]["linear_num_key_heads"] = 4;
  c["text_config"]["linear_num_value_heads"] = 4;
  return c;
}

// The same trainer (not qwen35_cpu) alone on one rank, a second reference for a group of it: its
// loss and gradient norm within `metric` relative and its weights within `weight` absolute of the
// group's (0: not checked).
struct SameTrainerOnOneRank {
  double metric = 0, weight = 0;
};

// `trainer` as a group of one (dist_peer under mpirun -np 1) on dir's batch: its metrics and its
// exported (whole) tensors by name.
inline std::pair<json, std::map<std::string, std::vector<float>>> one_rank_of(const TempDir& dir, json settings,
                                                                              const std::string& trainer) {
  TempDir alone("dist_one_rank");
  mlpt_test::write_bytes(alone / "batch.json", mlpt_test::read_bytes(dir / "batch.json"));
  settings["tensor_parallel"] = 1, settings["expert_parallel"] = 1, settings["pipeline_parallel"] = 1;
  auto run = train_group(alone, 1, settings, trainer);
  INFO(run.output);
  REQUIRE(run.status == 0);
  const json r = rank_report(alone, 0);
  REQUIRE_FALSE(r.contains("error"));
  const std::vector<float> data = read_floats(alone / "rank0.weights");
  std::map<std::string, std::vector<float>> weights;
  size_t at = 0;
  for (const json& t : r["tensors"]) {
    int64_t n = 1;
    for (int64_t d : t["shape"].get<std::vector<int64_t>>()) n *= d;
    REQUIRE(at + static_cast<size_t>(n) <= data.size());
    weights[t["name"]].assign(data.begin() + static_cast<std::ptrdiff_t>(at), data.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += static_cast<size_t>(n);
  }
  return {r["metrics"], weights};
}

// Runs one step on `ranks` ranks of tensor_parallel tp × expert_parallel ep × pipeline_parallel pp
// (and data parallelism over what is left), puts every rank's exported shards back in place (a
// pipeline stage exports its own layers' tensors) and compares them with the
// one-rank step's weights: the loss and gradient norm within metric_tolerance relative, every
// weight within weight_tolerance absolute (the weights and the step are O(0.1)). `trainer` is the
// group's trainer component (the one-rank step is always qwen35_cpu's, the reference; `same` adds
// the trainer's own one-rank step as a second one). `group_settings`: more settings of the group's
// ranks (moe_parallel_folding: the expert-parallel ranks training shares of their own).
inline void check_model_parallel_step(int ranks, int tp, int ep, double metric_tolerance,
                                      double weight_tolerance, const std::string& trainer = "qwen35_cpu",
                                      const SameTrainerOnOneRank& same = {},
                                      const json& model = splittable_micro_config(), int pp = 1,
                                      const json& group_settings = json::object()) {
  TempDir dir("dist_mp");
  json layout = {{"tensor_parallel", tp}, {"expert_parallel", ep}};
  if (pp > 1) layout["pipeline_parallel"] = pp;
  layout.update(group_settings);
  const bool folded = group_settings.value("moe_parallel_folding", false);
  const OneRankStep one = one_rank_step(dir, model, layout);
  const int model_ranks = tp * ep * pp;
  json same_metrics;
  std::map<std::string, std::vector<float>> same_weights;
  if (same.weight > 0) std::tie(same_metrics, same_weights) = one_rank_of(dir, one.settings, trainer);
  double worst_same_weight = 0, worst_same_metric = 0;
  auto run = train_group(dir, ranks, one.settings, trainer);
  INFO(run.output);
  REQUIRE(run.status == 0);
  std::map<std::string, std::vector<int>> covered;  // how many ranks hold each element
  std::map<std::string, std::vector<int>> published;  // how many ranks of replica 0 hold each element
  for (const auto& [name, w] : one.weights) covered[name].assign(w.size(), 0), published[name].assign(w.size(), 0);
  double worst_weight = 0, worst_metric = 0;
  int sequences = 0;  // over one rank of each batch share: the whole batch
  double fewest_micro_batches = 1e9, most_micro_batches = 0;  // the shares' own (padding not counted)
  // The first rank of `rank`'s share: of its model-parallel group (folded or not, the host gives the
  // group one share: its ep ranks cut it themselves).
  auto share_first = [&](int rank) { return rank - rank % model_ranks; };
  for (int rank = 0; rank < ranks; ++rank) {
    json r = rank_report(dir, rank);
    INFO("rank " << rank << ": " << r.dump(2));
    REQUIRE_FALSE(r.contains("error"));
    CHECK(r["version"] == one.version);
    // The clip norm's sum in a fixed order: every rank of the group gets the very same bits.
    CHECK(r["metrics"]["grad_norm"].get<double>() == rank_report(dir, 0)["metrics"]["grad_norm"].get<double>());
    if (share_first(rank) == rank) sequences += r["sequences"].get<int>();
    fewest_micro_batches = std::min(fewest_micro_batches, r["metrics"]["micro_batches"].get<double>());
    most_micro_batches = std::max(most_micro_batches, r["metrics"]["micro_batches"].get<double>());
    CHECK(r["sequences"] == rank_report(dir, share_first(rank))["sequences"]);  // one share per group
    for (const char* key : {"loss", "grad_norm"}) {
      INFO(key);
      const double want = one.metrics.at(key), got = r["metrics"][key].get<double>();
      worst_metric = std::max(worst_metric, std::fabs(got - want) / std::fabs(want));
      CHECK(got == Approx(want).epsilon(metric_tolerance));
      if (same.metric > 0) {
        const double alone = same_metrics[key].get<double>();
        worst_same_metric = std::max(worst_same_metric, std::fabs(got - alone) / std::fabs(alone));
        CHECK(got == Approx(alone).epsilon(same.metric));
      }
    }
    for (const char* key : {"tokens", "sequences", "forward_tokens", "backward_tokens"}) {
      INFO(key);
      CHECK(r["metrics"][key].get<double>() == one.metrics.at(key));
    }
    // The rank's shards, each a box of its global tensor.
    const std::vector<float> data = read_floats(dir / ("rank" + std::to_string(rank) + ".weights"));
    size_t at = 0;
    for (const json& t : r["tensors"]) {
      const std::string name = t["name"];
      INFO(name);
      REQUIRE(one.weights.count(name) == 1);
      const auto shape = t["shape"].get<std::vector<int64_t>>(), global = t["global_shape"].get<std::vector<int64_t>>();
      const auto offsets = t["offsets"].get<std::vector<int64_t>>();
      int64_t n = 1, whole = 1;
      for (size_t d = 0; d < shape.size(); ++d) n *= shape[d], whole *= global[d];
      REQUIRE(whole == static_cast<int64_t>(one.weights.at(name).size()));
      // qwen35_cpu splits the embedding and LM head by token ids over the TP ranks (vocab parallel):
      // ranges of V / tp rows, the first V % tp ranks one more.
      if (trainer == "qwen35_cpu" &&
          (name == "lm_head.weight" || name.find("embed_tokens.weight") != std::string::npos)) {
        const int64_t base = global[0] / tp, extra = global[0] % tp;
        CHECK(shape[0] == (offsets[0] < extra * (base + 1) ? base + 1 : base));
      }
      REQUIRE(at + static_cast<size_t>(n) <= data.size());
      for (int64_t e = 0; e < n; ++e) {  // element e of the box → its index in the global tensor
        int64_t rest = e, index = 0, stride = 1;
        std::vector<int64_t> place(shape.size());
        for (size_t d = shape.size(); d-- > 0;) place[d] = offsets[d] + rest % shape[d], rest /= shape[d];
        for (size_t d = shape.size(); d-- > 0;) index += place[d] * stride, stride *= global[d];
        worst_weight = std::max(worst_weight, std::fabs(double(data[at + e]) - one.weights.at(name)[index]));
        if (same.weight > 0)
          worst_same_weight = std::max(worst_same_weight, std::fabs(double(data[at + e]) - same_weights.at(name).at(index)));
        ++covered[name][index];
        if (r["replica"] == 0) ++published[name][index];
      }
      at += static_cast<size_t>(n);
    }
    CHECK(at == data.size());
  }
  CHECK(sequences == 6);
  // Together the ranks hold every element of every tensor (replicas more than once).
  for (const auto& [name, counts] : covered) {
    INFO(name);
    CHECK(*std::min_element(counts.begin(), counts.end()) >= 1);
  }
  // The host publishes the weights from the ranks of data-parallel replica 0 (trainer.h): they
  // alone must hold every element, folded or not.
  for (const auto& [name, counts] : published) {
    INFO("published by replica 0: " << name);
    CHECK(*std::min_element(counts.begin(), counts.end()) >= 1);
  }
  WARN("tp " << tp << " ep " << ep << " pp " << pp << (folded ? " folded" : "") << " on " << ranks
             << " ranks (" << fewest_micro_batches << ".." << most_micro_batches
             << " micro-batches per share): loss and grad_norm within " << worst_metric
             << " relative, weights within " << worst_weight
             << " of the one-rank step (which moved them up to " << one.moved << ")");
  CHECK(one.moved > 1e-3);
  CHECK(worst_weight <= weight_tolerance);
  if (same.weight > 0) {
    WARN("against " << trainer << " on one rank: loss and grad_norm within " << worst_same_metric << " relative, weights within "
                    << worst_same_weight);
    CHECK(worst_same_weight <= same.weight);
  }
}

// The device trainer's distributed optimizer on DP=2 x TP=tp ranks of `trainer` (qwen35_bf16,
// qwen35_cuda), against replicas keeping every master and moment (distributed_optimizer false):
// every exported element is the whole-master replica's bf16 rounding (or the same fp32 value, for
// the tensors the model keeps in fp32), and most are the rounding, not the master (distributed_test.cpp
// derives why).
inline void check_split_masters(int tp, const std::string& trainer) {
  const int ranks = 2 * tp;
  INFO("DP=2 x TP=" << tp << ", " << trainer);
  TempDir dir("dist_zero_masters");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), {{"tensor_parallel", tp}});
  auto run_with = [&](bool distributed) {
    json settings = one.settings;
    settings["distributed_optimizer"] = distributed;
    auto run = train_group(dir, ranks, settings, trainer);
    INFO(run.output);
    REQUIRE(run.status == 0);
    return rank_floats(dir, ranks, "weights");
  };
  const auto split = run_with(true), whole = run_with(false);
  for (int rank = 0; rank < ranks; ++rank) {
    INFO("rank " << rank);
    REQUIRE(split[rank].size() == whole[rank].size());
    size_t rounded = 0, differing = 0;
    for (size_t k = 0; k < whole[rank].size(); ++k) {
      const float w = whole[rank][k], got = split[rank][k], bf = mlpt::ref::round_bf16(w);
      if (got != w) ++(got == bf ? rounded : differing);
    }
    CHECK(differing == 0);
    CHECK(rounded > whole[rank].size() / 2);  // the export is the working copy, not the masters
  }
}

// The change list the device trainer attaches to a publish (mlpt/sdk/changed_elements.hpp) on DP=2
// ranks of `trainer` (qwen35_bf16, qwen35_cuda) with the masters split, recorded by dist_peer's
// publish=NAME sender, against the exported weights themselves: the first publish has none (no
// version to count from); after two steps the masks are exactly the elements whose bits changed in
// either step (the op marks exactly, so no extra bit: the promise and more), counted from the
// first publish; a publish with no step between has all-zero masks (published() cleared them); one
// step later exactly that step's changes; after load_state none again. Bits past each tensor's
// last element are zero and both replicas send the same masks. lr 1e-6 (the trainer's default) with
// Adam's first steps (updates of about lr) moves only the weights near a bf16 rounding boundary or
// near zero across one: a mix of changed and unchanged elements, so all-ones masks would fail.
inline void check_change_masks(const std::string& trainer) {
  INFO("DP=2, " << trainer);
  TempDir dir("dist_change_masks"), state("dist_change_masks_state");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config());
  json settings = one.settings;
  settings["optimizer"] = {{"lr", 1e-6}};
  const Launch run = train_group(
      dir, 2, settings, trainer,
      "save=" + state.str() + ",publish=a,step,export=mid,step,publish=b,publish=c,step,publish=d,load=" +
          state.str() + ",publish=e");
  INFO(run.output);
  REQUIRE(run.status == 0);
  std::vector<int64_t> numel;
  for (const std::string& name : one.names) numel.push_back(int64_t(one.weights.at(name).size()));
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> u(v.size());
    std::memcpy(u.data(), v.data(), v.size() * 4);
    return u;
  };
  auto read_words = [&](int rank, const std::string& name) {
    const std::string bytes =
        mlpt_test::read_bytes(dir / ("rank" + std::to_string(rank) + "." + name + ".masks"));
    std::vector<uint64_t> w(bytes.size() / 8);
    std::memcpy(w.data(), bytes.data(), w.size() * 8);
    return w;
  };
  // Mask words (each tensor's ceil(numel / 64), in export order) with a bit for every element whose
  // bits differ between consecutive `versions` of the concatenated export: what the masks must be.
  auto expected = [&](const std::vector<std::vector<uint32_t>>& versions) {
    std::vector<uint64_t> words;
    int64_t first = 0;
    for (int64_t n : numel) {
      const size_t at = words.size();
      words.resize(at + size_t((n + 63) / 64), 0);
      for (int64_t e = 0; e < n; ++e)
        for (size_t v = 0; v + 1 < versions.size(); ++v)
          if (versions[v][size_t(first + e)] != versions[v + 1][size_t(first + e)])
            words[at + size_t(e / 64)] |= uint64_t{1} << (e % 64);
      first += n;
    }
    return words;
  };
  auto count = [](const std::vector<uint64_t>& w) {
    int64_t c = 0;
    for (uint64_t x : w) c += __builtin_popcountll(x);
    return c;
  };
  const int64_t total = std::accumulate(numel.begin(), numel.end(), int64_t{0});
  std::vector<std::vector<uint64_t>> replica_masks;
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const json report = rank_report(dir, rank);
    const json& published = report["published"];
    auto weights = [&](const std::string& name) {
      return bits(read_floats(dir / ("rank" + std::to_string(rank) + "." + name + ".weights")));
    };
    const auto a = weights("a"), mid = weights("mid"), b = weights("b"), c = weights("c"), d = weights("d");
    REQUIRE(a.size() == size_t(total));
    CHECK(published["a"]["changes"] == false);
    CHECK(published["e"]["changes"] == false);  // the state loaded replaced the weights
    for (const char* name : {"b", "c", "d"}) {
      INFO("publish " << name);
      REQUIRE(published[name]["changes"] == true);
      CHECK(published[name]["mask_tensors"] == numel.size());
    }
    CHECK(published["b"]["since_version"] == published["a"]["version"]);
    CHECK(published["c"]["since_version"] == published["b"]["version"]);
    CHECK(published["d"]["since_version"] == published["c"]["version"]);
    CHECK(published["b"]["version"].get<uint64_t>() == published["a"]["version"].get<uint64_t>() + 2);

    const auto mb = read_words(rank, "b"), mc = read_words(rank, "c"), md = read_words(rank, "d");
    const auto want_b = expected({a, mid, b}), want_d = expected({c, d});
    REQUIRE(mb.size() == want_b.size());
    CHECK(mb == want_b);                // the OR of both steps' changes, no more
    CHECK(expected({a, b}) == want_b);  // (and so every element that differs between a and b)
    CHECK(c == b);
    CHECK(count(mc) == 0);
    CHECK(md == want_d);
    size_t at = 0;  // no bit past a tensor's last element
    for (int64_t n : numel) {
      at += size_t((n + 63) / 64);
      if (n % 64) CHECK((mb[at - 1] >> (n % 64)) == 0);
    }
    const int64_t marked = count(mb), changed_ab = count(expected({a, b}));
    WARN(trainer << " rank " << rank << ": " << marked << " of " << total
                 << " elements marked over two steps (" << changed_ab << " differ between the publishes), "
                 << count(md) << " after one; masks " << mb.size() * 8 << " bytes");
    CHECK(marked > 0);
    CHECK(marked < total);
    replica_masks.push_back(mb);
  }
  CHECK(replica_masks[0] == replica_masks[1]);
}

// compute_logprobs of `trainer` on (PP=pp x) TP=2 x EP=2 groups of `ranks` (4 · pp or 8) with MoE parallel
// folding (each expert-parallel rank scoring its part of the share) against the same groups
// without it (each scoring the whole share): every rank's logprobs within `tolerance` (0: bit for
// bit, as distributed_test.cpp derives for the host platform).
inline void check_folded_scores(int ranks, int64_t micro_batch_tokens, const std::string& trainer,
                                double tolerance = 0.0, int pp = 1) {
  INFO(ranks << " ranks, pp " << pp << ", micro_batch_tokens " << micro_batch_tokens << ", " << trainer);
  TempDir dir("dist_folded_score");
  const OneRankStep one = one_rank_step(
      dir, splittable_micro_config(), {{"tensor_parallel", 2}, {"expert_parallel", 2}, {"pipeline_parallel", pp}});
  auto score = [&](bool folded) {
    json settings = one.settings;
    settings["moe_parallel_folding"] = folded;
    settings["micro_batch_tokens"] = micro_batch_tokens;
    const Launch run = train_group(dir, ranks, settings, trainer, "score");
    INFO((folded ? "folded: " : "unfolded: ") << run.output);
    REQUIRE(run.status == 0);
    return rank_floats(dir, ranks, "logprobs");
  };
  const auto folded = score(true), whole = score(false);
  for (int rank = 0; rank < ranks; ++rank) {
    INFO("rank " << rank);
    CHECK(!whole[rank].empty());
    REQUIRE(folded[rank].size() == whole[rank].size());
    double worst = 0;
    for (size_t t = 0; t < whole[rank].size(); ++t)
      worst = std::max(worst, std::fabs(double(folded[rank][t]) - double(whole[rank][t])));
    CHECK(worst <= tolerance);
  }
  size_t scored = 0;  // tokens with a logprob (not a sequence's first): the check compares values
  for (float v : whole[0]) scored += v != 0.0f;
  CHECK(scored > whole[0].size() / 2);
}

}  // namespace dist_test
