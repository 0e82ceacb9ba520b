#include "core/plugin/describe.hpp"

#include "core/config/component_kinds.hpp"
#include "mlpt/engine.h"
#include "mlpt/harness.h"
#include "mlpt/reward.h"
#include "mlpt/sandbox.h"
#include "mlpt/trainer.h"
#include "mlpt/transport.h"

namespace mlpt::plugin {
namespace {

// Reads an int capability only if the plugin's record is large enough to hold it.
#define CAP(json, caps, type, field) \
  if (MLPT_HAS_FIELD(caps, type, field)) json[#field] = static_cast<int64_t>((caps)->field)

}  // namespace

nlohmann::json describe_capabilities(const Component& c) {
  nlohmann::json j = nlohmann::json::object();
  switch (c.kind) {
    case MLPT_COMPONENT_TRAINER: {
      auto* p = c.caps<mlpt_trainer_capabilities>();
      CAP(j, p, mlpt_trainer_capabilities, supports_routing_replay);
      CAP(j, p, mlpt_trainer_capabilities, supports_state_save);
      CAP(j, p, mlpt_trainer_capabilities, device_type);
      break;
    }
    case MLPT_COMPONENT_ENGINE: {
      auto* p = c.caps<mlpt_engine_capabilities>();
      CAP(j, p, mlpt_engine_capabilities, returns_logprobs);
      CAP(j, p, mlpt_engine_capabilities, returns_routed_experts);
      CAP(j, p, mlpt_engine_capabilities, keeps_sessions);
      CAP(j, p, mlpt_engine_capabilities, supports_cancel);
      CAP(j, p, mlpt_engine_capabilities, deterministic_seed);
      break;
    }
    case MLPT_COMPONENT_TRANSPORT: {
      auto* p = c.caps<mlpt_transport_capabilities>();
      CAP(j, p, mlpt_transport_capabilities, zero_copy);
      CAP(j, p, mlpt_transport_capabilities, cross_process);
      CAP(j, p, mlpt_transport_capabilities, cross_node);
      CAP(j, p, mlpt_transport_capabilities, supports_cuda);
      CAP(j, p, mlpt_transport_capabilities, checksum);
      break;
    }
    case MLPT_COMPONENT_SANDBOX: {
      auto* p = c.caps<mlpt_sandbox_capabilities>();
      CAP(j, p, mlpt_sandbox_capabilities, isolates_network);
      CAP(j, p, mlpt_sandbox_capabilities, isolates_pids);
      CAP(j, p, mlpt_sandbox_capabilities, limits_memory);
      CAP(j, p, mlpt_sandbox_capabilities, limits_processes);
      CAP(j, p, mlpt_sandbox_capabilities, discards_writes);
      break;
    }
    case MLPT_COMPONENT_REWARD: {
      auto* p = c.caps<mlpt_reward_capabilities>();
      CAP(j, p, mlpt_reward_capabilities, needs_sandbox);
      CAP(j, p, mlpt_reward_capabilities, binary);
      break;
    }
    case MLPT_COMPONENT_HARNESS: {
      auto* p = c.caps<mlpt_harness_capabilities>();
      CAP(j, p, mlpt_harness_capabilities, needs_sandbox);
      CAP(j, p, mlpt_harness_capabilities, produces_patch);
      break;
    }
  }
  return j;
}

nlohmann::json describe(const Plugin& plugin) {
  nlohmann::json j;
  j["path"] = plugin.path().string();
  j["name"] = plugin.name();
  j["version"] = plugin.version();
  auto text = [](mlpt_abi_version v) { return std::to_string(v.major) + "." + std::to_string(v.minor); };
  j["abi_version"] = text(plugin.abi_version());
  j["negotiated_abi_version"] = text(plugin.negotiated_version());
  j["host_abi_version"] = text(mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR});
  j["build_info"] = plugin.build_info();
  j["notes"] = plugin.notes();
  j["components"] = nlohmann::json::array();
  for (const auto& c : plugin.components()) {
    j["components"].push_back({{"kind", config::kind_name(c.kind)},
                               {"name", c.name},
                               {"description", c.description},
                               {"capabilities", describe_capabilities(c)}});
  }
  return j;
}

}  // namespace mlpt::plugin
