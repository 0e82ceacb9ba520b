#include "core/plugin/component_tables.hpp"

#include <cstring>
#include <map>

#include "core/error.hpp"
#include "mlpt/engine.h"
#include "mlpt/harness.h"
#include "mlpt/reward.h"
#include "mlpt/sandbox.h"
#include "mlpt/trainer.h"
#include "mlpt/transport.h"

namespace mlpt::plugin {
namespace {

#define FN(type, field, required) TableRules::Function{#field, offsetof(type, field), required}

const std::map<mlpt_component_kind, TableRules>& all_rules() {
  static const std::map<mlpt_component_kind, TableRules> rules = {
      {MLPT_COMPONENT_TRAINER,
       {MLPT_TRAINER_API_STRUCT_SIZE_1_0, MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE,
        {FN(mlpt_trainer_api, create, true), FN(mlpt_trainer_api, destroy, true),
         FN(mlpt_trainer_api, train_step, true), FN(mlpt_trainer_api, compute_logprobs, true),
         FN(mlpt_trainer_api, export_weights, true), FN(mlpt_trainer_api, save_state, false),
         FN(mlpt_trainer_api, load_state, false), FN(mlpt_trainer_api, publish_weights, false)}}},
      {MLPT_COMPONENT_ENGINE,
       {MLPT_ENGINE_API_STRUCT_SIZE_1_0, MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE,
        {FN(mlpt_engine_api, create, true), FN(mlpt_engine_api, destroy, true),
         FN(mlpt_engine_api, model_info, true), FN(mlpt_engine_api, generate, true),
         FN(mlpt_engine_api, cancel, true), FN(mlpt_engine_api, session_release, true),
         FN(mlpt_engine_api, pause, true), FN(mlpt_engine_api, resume, true),
         FN(mlpt_engine_api, load_weights, true),
         // 1.2: the host falls back to the 1.1 functions when a table lacks these.
         FN(mlpt_engine_api, query_model_info, false), FN(mlpt_engine_api, pause_generation, false),
         FN(mlpt_engine_api, resume_generation, false), FN(mlpt_engine_api, submit, false),
         FN(mlpt_engine_api, request_is_ready, false), FN(mlpt_engine_api, request_await, false),
         FN(mlpt_engine_api, request_result, false), FN(mlpt_engine_api, request_release, false),
         FN(mlpt_engine_api, weight_shards, false), FN(mlpt_engine_api, fetch_weights, false)}}},
      {MLPT_COMPONENT_TRANSPORT,
       {MLPT_TRANSPORT_API_STRUCT_SIZE_1_0, MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE_1_0,
        {FN(mlpt_transport_api, create, true), FN(mlpt_transport_api, destroy, true),
         FN(mlpt_transport_api, send, true), FN(mlpt_transport_api, receive, true),
         FN(mlpt_transport_api, release, true)}}},
      {MLPT_COMPONENT_SANDBOX,
       {MLPT_SANDBOX_API_STRUCT_SIZE_1_0, MLPT_SANDBOX_CAPABILITIES_STRUCT_SIZE,
        {FN(mlpt_sandbox_api, runtime_create, true), FN(mlpt_sandbox_api, runtime_destroy, true),
         FN(mlpt_sandbox_api, create, true), FN(mlpt_sandbox_api, destroy, true),
         FN(mlpt_sandbox_api, exec, true), FN(mlpt_sandbox_api, read_file, true),
         FN(mlpt_sandbox_api, write_file, true)}}},
      {MLPT_COMPONENT_REWARD,
       {MLPT_REWARD_API_STRUCT_SIZE_1_0, MLPT_REWARD_CAPABILITIES_STRUCT_SIZE,
        {FN(mlpt_reward_api, create, true), FN(mlpt_reward_api, destroy, true),
         FN(mlpt_reward_api, grade, true)}}},
      {MLPT_COMPONENT_HARNESS,
       {MLPT_HARNESS_API_STRUCT_SIZE_1_0, MLPT_HARNESS_CAPABILITIES_STRUCT_SIZE,
        {FN(mlpt_harness_api, create, true), FN(mlpt_harness_api, destroy, true),
         FN(mlpt_harness_api, episode_start, true), FN(mlpt_harness_api, episode_step, true),
         FN(mlpt_harness_api, episode_finish, true), FN(mlpt_harness_api, episode_destroy, true)}}},
  };
  return rules;
}

#undef FN

}  // namespace

const TableRules& table_rules(mlpt_component_kind kind) {
  auto it = all_rules().find(kind);
  if (it == all_rules().end()) throw Error(MLPT_INVALID_ARGUMENT, "unknown component kind " + std::to_string(kind));
  return it->second;
}

std::vector<std::string> missing_functions(mlpt_component_kind kind, const void* api) {
  std::vector<std::string> missing;
  size_t api_size = *static_cast<const size_t*>(api);
  for (const auto& f : table_rules(kind).functions) {
    void* fn = nullptr;  // a slot past the plugin's table (an older version) counts as NULL
    if (f.offset + sizeof(fn) <= api_size) std::memcpy(&fn, static_cast<const char*>(api) + f.offset, sizeof(fn));
    if (f.required && !fn) missing.emplace_back(f.name);
  }
  return missing;
}

}  // namespace mlpt::plugin
