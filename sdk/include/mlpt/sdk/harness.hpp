// C++ adapter for the harness component (mlpt/harness.h): a Harness class (constructor taking the
// config JSON, `start(args)` returning a new Episode) and an Episode class.
#pragma once

#include <memory>

#include "mlpt/harness.h"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::sdk {

class Episode {
 public:
  virtual ~Episode() = default;
  virtual void step(std::string_view reply_json, const mlpt_sink* out) = 0;
  virtual void finish(mlpt_episode_end end, const mlpt_sink* out) = 0;
};

class Harness {
 public:
  virtual ~Harness() = default;
  virtual std::unique_ptr<Episode> start(const mlpt_episode_start_args& args) = 0;  // thread-safe
};

namespace detail {
inline Episode* as_episode(mlpt_harness_episode* e) {
  if (!e) throw Error(MLPT_INVALID_ARGUMENT, "episode handle is NULL");
  return reinterpret_cast<Episode*>(e);
}
}  // namespace detail

template <class T>
const mlpt_harness_api* harness_api() {
  using detail::as_episode;
  static const mlpt_harness_api api = {
      MLPT_HARNESS_API_STRUCT_SIZE,
      [](mlpt_harness_create_args* a) {
        return guard("harness.create", [&] {
          require_struct(a, MLPT_HARNESS_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_harness_create_args");
          a->harness = reinterpret_cast<mlpt_harness*>(static_cast<Harness*>(new T(view(a->config_json))));
        });
      },
      [](mlpt_harness* h) { delete reinterpret_cast<Harness*>(h); },
      [](mlpt_episode_start_args* a) {
        return guard("harness.episode_start", [&] {
          require_struct(a, MLPT_EPISODE_START_ARGS_STRUCT_SIZE_1_0, "mlpt_episode_start_args");
          if (!a->harness) throw Error(MLPT_INVALID_ARGUMENT, "harness handle is NULL");
          auto episode = reinterpret_cast<Harness*>(a->harness)->start(*a);
          a->episode = reinterpret_cast<mlpt_harness_episode*>(episode.release());
        });
      },
      [](mlpt_episode_step_args* a) {
        return guard("harness.episode_step", [&] {
          require_struct(a, MLPT_EPISODE_STEP_ARGS_STRUCT_SIZE_1_0, "mlpt_episode_step_args");
          as_episode(a->episode)->step(view(a->reply_json), a->out);
        });
      },
      [](mlpt_episode_finish_args* a) {
        return guard("harness.episode_finish", [&] {
          require_struct(a, MLPT_EPISODE_FINISH_ARGS_STRUCT_SIZE_1_0, "mlpt_episode_finish_args");
          as_episode(a->episode)->finish(a->end, a->out);
        });
      },
      [](mlpt_harness_episode* e) { delete reinterpret_cast<Episode*>(e); },
      nullptr,  // extension_start
  };
  return &api;
}

template <class T>
ComponentSpec harness_component(std::string_view name, std::string_view description,
                                 const mlpt_harness_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_HARNESS, name, description, harness_api<T>(), caps);
}

}  // namespace mlpt::sdk
