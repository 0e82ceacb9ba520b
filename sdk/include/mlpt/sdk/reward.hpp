// C++ adapter for the reward component (mlpt/reward.h): derive from mlpt::sdk::Reward with a
// constructor taking the config JSON; list reward_component<YourReward>(...).
#pragma once

#include "mlpt/reward.h"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::sdk {

class Reward {
 public:
  virtual ~Reward() = default;
  virtual void grade(mlpt_grade_args& args) = 0;  // thread-safe
};

template <class T>
const mlpt_reward_api* reward_api() {
  static const mlpt_reward_api api = {
      MLPT_REWARD_API_STRUCT_SIZE,
      [](mlpt_reward_create_args* a) {
        return guard("reward.create", [&] {
          require_struct(a, MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_reward_create_args");
          a->reward = reinterpret_cast<mlpt_reward*>(static_cast<Reward*>(new T(view(a->config_json))));
        });
      },
      [](mlpt_reward* r) { delete reinterpret_cast<Reward*>(r); },
      [](mlpt_grade_args* a) {
        return guard("reward.grade", [&] {
          require_struct(a, MLPT_GRADE_ARGS_STRUCT_SIZE_1_0, "mlpt_grade_args");
          if (!a->reward) throw Error(MLPT_INVALID_ARGUMENT, "reward handle is NULL");
          reinterpret_cast<Reward*>(a->reward)->grade(*a);
        });
      },
      nullptr,  // extension_start
  };
  return &api;
}

template <class T>
ComponentSpec reward_component(std::string_view name, std::string_view description,
                                const mlpt_reward_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_REWARD, name, description, reward_api<T>(), caps);
}

}  // namespace mlpt::sdk
