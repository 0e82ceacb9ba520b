// C++ adapter for the engine component (mlpt/engine.h): derive from mlpt::sdk::Engine, give the
// class a constructor taking the config JSON, and list engine_component<YourEngine>(...) in
// MLPT_SDK_PLUGIN. Methods throw mlpt::sdk::Error; the adapter turns that into the ABI's errors.
#pragma once

#include "mlpt/engine.h"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::sdk {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual void model_info(mlpt_engine_model_info& info) = 0;
  virtual void generate(mlpt_generate_args& args) = 0;  // thread-safe
  virtual void cancel(uint64_t request_id) = 0;         // thread-safe
  virtual void session_release(uint64_t session_id) = 0;
  virtual void pause() = 0;
  virtual void resume() = 0;
  virtual void load_weights(const mlpt_load_weights_args& args) = 0;
};

namespace detail {
inline Engine* as_engine(mlpt_engine* e) {
  if (!e) throw Error(MLPT_INVALID_ARGUMENT, "engine handle is NULL");
  return reinterpret_cast<Engine*>(e);
}
}  // namespace detail

template <class T>
const mlpt_engine_api* engine_api() {
  using detail::as_engine;
  static const mlpt_engine_api api = {
      MLPT_ENGINE_API_STRUCT_SIZE,
      [](mlpt_engine_create_args* a) {
        return guard("engine.create", [&] {
          require_struct(a, MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_engine_create_args");
          a->engine = reinterpret_cast<mlpt_engine*>(static_cast<Engine*>(new T(view(a->config_json))));
        });
      },
      [](mlpt_engine* e) { delete reinterpret_cast<Engine*>(e); },
      [](mlpt_engine* e, mlpt_engine_model_info* info) {
        return guard("engine.model_info", [&] {
          require_struct(info, MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE, "mlpt_engine_model_info");
          as_engine(e)->model_info(*info);
        });
      },
      [](mlpt_generate_args* a) {
        return guard("engine.generate", [&] {
          require_struct(a, MLPT_GENERATE_ARGS_STRUCT_SIZE, "mlpt_generate_args");
          as_engine(a->engine)->generate(*a);
        });
      },
      [](mlpt_cancel_args* a) {
        return guard("engine.cancel", [&] {
          require_struct(a, MLPT_CANCEL_ARGS_STRUCT_SIZE, "mlpt_cancel_args");
          as_engine(a->engine)->cancel(a->request_id);
        });
      },
      [](mlpt_session_release_args* a) {
        return guard("engine.session_release", [&] {
          require_struct(a, MLPT_SESSION_RELEASE_ARGS_STRUCT_SIZE, "mlpt_session_release_args");
          as_engine(a->engine)->session_release(a->session_id);
        });
      },
      [](mlpt_engine* e) { return guard("engine.pause", [&] { as_engine(e)->pause(); }); },
      [](mlpt_engine* e) { return guard("engine.resume", [&] { as_engine(e)->resume(); }); },
      [](mlpt_load_weights_args* a) {
        return guard("engine.load_weights", [&] {
          require_struct(a, MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE_1_0, "mlpt_load_weights_args");
          as_engine(a->engine)->load_weights(*a);
        });
      },
      nullptr,  // extension_start
  };
  return &api;
}

template <class T>
ComponentSpec engine_component(std::string_view name, std::string_view description,
                                const mlpt_engine_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_ENGINE, name, description, engine_api<T>(), caps);
}

}  // namespace mlpt::sdk
