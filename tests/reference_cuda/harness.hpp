// Loads the built mlpt_reference plugin through the core loader and makes tiny checkpoints with the
// `mlpt model init` tool, so every call below crosses the real C ABI.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plugin/plugin.hpp"
#include "model_fixtures.hpp"
#include "mlpt/engine.h"
#include "mlpt/trainer.h"
#include "tests/support/test_util.hpp"

namespace reftest {

inline std::string tool() { return std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model"; }

// A checkpoint of the micro config (vocab 37, hidden 16, 4 layers), made by `mlpt model init`.
inline std::string make_checkpoint(const mlpt_test::TempDir& dir, const std::string& name, uint64_t seed,
                                   const nlohmann::json& config = mlpt_test::micro_config_json()) {
  std::string cfg = dir / (name + ".config.json");
  mlpt_test::write_bytes(cfg, config.dump());
  std::string out = dir / name;
  int status = 0;
  std::string log = mlpt_test::run_command(tool() + " init --config " + cfg + " --seed " + std::to_string(seed) +
                                               " --out " + out + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  return out;
}

struct Loaded {
  mlpt::plugin::HostServices host;
  std::shared_ptr<mlpt::plugin::Plugin> plugin;
  mlpt::plugin::Component engine, trainer;
  Loaded() {
    plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
    engine = plugin->component(MLPT_COMPONENT_ENGINE, "qwen35_cpu");
    trainer = plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu");
  }
  const mlpt_engine_api* e() const { return engine.table<mlpt_engine_api>(); }
  const mlpt_trainer_api* t() const { return trainer.table<mlpt_trainer_api>(); }
};

inline Loaded& loaded() {
  static Loaded l;
  return l;
}

// RAII handles over the C tables.
class Engine {
 public:
  explicit Engine(const std::string& settings) {
    mlpt_engine_create_args a{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, {settings.data(), settings.size()}, nullptr};
    mlpt::plugin::check(loaded().engine, loaded().e()->create(&a), "engine create");
    e_ = a.engine;
  }
  ~Engine() { loaded().e()->destroy(e_); }
  mlpt_engine* get() const { return e_; }

 private:
  mlpt_engine* e_ = nullptr;
};

class Trainer {
 public:
  explicit Trainer(const std::string& settings) {
    mlpt_trainer_create_args a{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, {settings.data(), settings.size()}, nullptr};
    mlpt::plugin::check(loaded().trainer, loaded().t()->create(&a), "trainer create");
    t_ = a.trainer;
  }
  ~Trainer() { loaded().t()->destroy(t_); }
  mlpt_trainer* get() const { return t_; }

 private:
  mlpt_trainer* t_ = nullptr;
};

// The error message a create call gives, or "" when it succeeds.
inline std::string create_error(mlpt_component_kind kind, const std::string& settings) {
  try {
    if (kind == MLPT_COMPONENT_ENGINE) Engine e(settings);
    else Trainer t(settings);
  } catch (const mlpt::Error& e) {
    return e.what();
  }
  return "";
}

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int16_t> routed;
  mlpt_finish_reason reason{};
  uint64_t version = 0;
};

struct GenerateOptions {
  uint64_t request_id = 1, session_id = 0, seed = 1;
  float temperature = 1.0f, top_p = 1.0f;
  int32_t top_k = 0, max_new = 8;
  std::vector<int32_t> stop;
  bool record = false;
  size_t routed_from = 0;
};

inline Generation generate(const Engine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                           int64_t routes_per_token = 0) {
  Generation g;
  g.tokens.resize(o.max_new);
  g.logprobs.resize(o.max_new);
  if (o.record) g.routed.resize((prompt.size() + o.max_new - o.routed_from) * routes_per_token);
  mlpt_generate_args a{};
  a.struct_size = MLPT_GENERATE_ARGS_STRUCT_SIZE;
  a.engine = engine.get();
  a.request_id = o.request_id;
  a.session_id = o.session_id;
  a.tokens = prompt.data();
  a.num_tokens = prompt.size();
  a.sampling = {MLPT_SAMPLING_PARAMS_STRUCT_SIZE, o.temperature, o.top_p, o.top_k, o.seed};
  a.max_new_tokens = o.max_new;
  a.stop_tokens = o.stop.data();
  a.num_stop_tokens = o.stop.size();
  a.record_routed_experts = o.record;
  a.routed_experts_from = o.routed_from;
  a.out_tokens = g.tokens.data();
  a.out_logprobs = g.logprobs.data();
  a.out_routed_experts = o.record ? g.routed.data() : nullptr;
  mlpt::plugin::check(loaded().engine, loaded().e()->generate(&a), "generate");
  g.tokens.resize(a.out_num_tokens);
  g.logprobs.resize(a.out_num_tokens);
  if (o.record) g.routed.resize((prompt.size() + a.out_num_tokens - o.routed_from) * routes_per_token);
  g.reason = a.out_finish_reason;
  g.version = a.out_weight_version;
  return g;
}

// A batch of sequences in the trainer ABI's layout, owning its arrays.
struct Batch {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> gen_logprobs, advantages;
  std::vector<int16_t> routed;
  int64_t layers = 0, k = 0;
  mlpt_train_batch abi{};

  void add(const std::vector<int32_t>& seq, size_t prompt_len, float advantage, const std::vector<float>& gen = {}) {
    for (size_t i = 0; i < seq.size(); ++i) {
      tokens.push_back(seq[i]);
      loss_mask.push_back(i >= prompt_len);
      gen_logprobs.push_back(i >= prompt_len && i - prompt_len < gen.size() ? gen[i - prompt_len] : 0.0f);
    }
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    advantages.push_back(advantage);
    truncated.push_back(0);
  }
  const mlpt_train_batch* get() {
    abi = mlpt_train_batch{};
    abi.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    abi.num_sequences = advantages.size();
    abi.offsets = offsets.data();
    abi.tokens = tokens.data();
    abi.loss_mask = loss_mask.data();
    abi.generation_logprobs = gen_logprobs.data();
    abi.advantages = advantages.data();
    abi.truncated = truncated.data();
    abi.routed_experts = routed.empty() ? nullptr : routed.data();
    abi.num_moe_layers = layers;
    abi.experts_per_token = k;
    return &abi;
  }
};

inline std::vector<float> compute_logprobs(const Trainer& t, Batch& b) {
  std::vector<float> out(b.tokens.size());
  mlpt_compute_logprobs_args a{MLPT_COMPUTE_LOGPROBS_ARGS_STRUCT_SIZE, t.get(), b.get(), out.data()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->compute_logprobs(&a), "compute_logprobs");
  return out;
}

inline std::string settings(const std::string& checkpoint, const std::string& extra = "") {
  return R"({"checkpoint": ")" + checkpoint + "\"" + (extra.empty() ? "" : ", " + extra) + "}";
}

}  // namespace reftest
