// C++ adapter for the engine component (mlpt/engine.h): derive from mlpt::sdk::Engine, give the
// class a constructor taking the config JSON, and list engine_component<YourEngine>(...) in
// MLPT_SDK_PLUGIN. Methods throw mlpt::sdk::Error; the adapter turns that into the ABI's errors.
//
// An SDK engine is asynchronous: `submit` takes a GenerationRequest and completes it later (or
// before returning) with finish() or fail(). The adapter builds the whole 1.2 table from that (poll,
// await, result, release) and also the blocking `generate` of 1.0/1.1 hosts (submit, wait, copy into
// the caller's buffers), so one implementation serves every host.
//
// fetch_weights (ABI 1.2) is the adapter's too: it receives the layout `weight_layout` names (whole
// tensors by default) through the bound receiver, calls load_weights, and releases what it received.
//
// An engine that runs as one rank of an engine group (engine.h, Engine groups) has a constructor
// taking (config JSON, const mlpt_component_group*); the adapter refuses a group of several ranks
// for an engine without one.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "mlpt/engine.h"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/reshard.hpp"
#include "mlpt/sdk/routed_experts.hpp"
#include "mlpt/sdk/transport.hpp"
#include "mlpt/sdk/weight_delivery.hpp"

namespace mlpt::sdk {

// One submitted request: its inputs (copied from the submitter), the result the engine fills, and
// its completion. Thread-safe. The engine holds the shared_ptr it was given until it calls finish()
// or fail() (exactly once), and must not touch the request afterwards.
class GenerationRequest : public std::enable_shared_from_this<GenerationRequest> {
 public:
  // ---- inputs (as in mlpt_submit_args) ----
  uint64_t id = 0, session_id = 0;
  std::vector<int32_t> tokens;
  mlpt_sampling_params sampling{};
  int32_t max_new_tokens = 1;
  std::vector<int32_t> stop_tokens;
  bool record_routed_experts = false;
  size_t routed_experts_from = 0;

  // ---- result: set by the engine before finish() ----
  std::vector<int32_t> out_tokens;
  std::vector<float> out_logprobs;                     // empty, or one per out_token
  std::vector<std::vector<int16_t>> out_routed_experts;  // [moe layer] -> [position][k], when recorded
  uint64_t out_weight_version = 0;

  // Marks the request ready and calls its on_ready. Call with no engine lock held.
  void finish(mlpt_finish_reason reason) { complete(reason, MLPT_OK, {}); }
  // Marks the request failed (ready, result_args returns the error) and calls its on_ready.
  void fail(mlpt_error_code code, std::string message) { complete(MLPT_FINISH_CANCELLED, code, std::move(message)); }

  bool ready() const {
    std::lock_guard l(mutex_);
    return ready_;
  }
  void wait() const {
    std::unique_lock l(mutex_);
    ready_changed_.wait(l, [&] { return ready_; });
  }
  mlpt_finish_reason finish_reason() const { return reason_; }  // once ready
  // Once ready: the failure (MLPT_OK when it finished), for result_args.
  mlpt_error_code error_code() const { return error_code_; }
  const std::string& error_message() const { return error_message_; }

  // The opaque ABI handle is the request itself; the adapter keeps it alive until it is released.
  mlpt_engine_request* handle() { return reinterpret_cast<mlpt_engine_request*>(this); }
  static GenerationRequest* from(mlpt_engine_request* r) {
    if (!r) throw Error(MLPT_INVALID_ARGUMENT, "request handle is NULL");
    return reinterpret_cast<GenerationRequest*>(r);
  }

  // Set by the adapter at submission.
  mlpt_request_ready_fn on_ready = nullptr;
  void* on_ready_user_data = nullptr;
  std::shared_ptr<GenerationRequest> held_by_submitter;  // dropped by request_release
  std::vector<const int16_t*> routed_layer_pointers;     // out_routed_experts[layer].data()

 private:
  void complete(mlpt_finish_reason reason, mlpt_error_code code, std::string message) {
    auto keep = shared_from_this();  // a release racing with on_ready must not free it under us
    for (const auto& layer : out_routed_experts) routed_layer_pointers.push_back(layer.data());
    {
      std::lock_guard l(mutex_);
      reason_ = reason, error_code_ = code, error_message_ = std::move(message);
      ready_ = true;
    }
    ready_changed_.notify_all();
    if (on_ready) on_ready(on_ready_user_data, handle());
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable ready_changed_;
  bool ready_ = false;
  mlpt_finish_reason reason_ = MLPT_FINISH_STOP;
  mlpt_error_code error_code_ = MLPT_OK;
  std::string error_message_;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual void model_info(mlpt_engine_model_info& info) = 0;  // thread-safe
  // Takes the request (its inputs are set and `request->id` is unique among requests in flight);
  // completes it later with finish()/fail(), on any thread, or throws to refuse it now (then it is
  // never completed). While paused, requests queue. Thread-safe.
  virtual void submit(std::shared_ptr<GenerationRequest> request) = 0;
  virtual void cancel(uint64_t request_id) = 0;  // thread-safe
  virtual void session_release(uint64_t session_id) = 0;
  virtual void pause() = 0;
  virtual void resume() = 0;
  virtual void load_weights(const mlpt_load_weights_args& args) = 0;
  // The shards of the weights this rank holds (engine.h, weight_shards), with `data` NULL; they live
  // as long as the engine. Count 0 (the default): whole tensors.
  virtual TensorLayout weight_layout() { return {}; }
  // A load this rank cannot take part in with tensors (its fetch's receive failed with `why`): an
  // engine group still needs the rank in the collective load, to fail it on every rank (engine.h,
  // Engine groups). The default (an engine alone): nothing to do.
  virtual void load_refused(const Error& why) { (void)why; }
};

namespace detail {
inline Engine* as_engine(mlpt_engine* e) {
  if (!e) throw Error(MLPT_INVALID_ARGUMENT, "engine handle is NULL");
  return reinterpret_cast<Engine*>(e);
}

// The request of a submit or generate call, its inputs copied.
template <class Args>
std::shared_ptr<GenerationRequest> request_from(const Args& a) {
  if (!a.tokens || a.num_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "tokens: at least one token is required");
  if (a.num_stop_tokens && !a.stop_tokens) throw Error(MLPT_INVALID_ARGUMENT, "stop_tokens is NULL");
  if (a.sampling.struct_size < MLPT_SAMPLING_PARAMS_STRUCT_SIZE)
    throw Error(MLPT_INVALID_ARGUMENT, "sampling.struct_size is " + std::to_string(a.sampling.struct_size) + ", less than " +
                                           std::to_string(MLPT_SAMPLING_PARAMS_STRUCT_SIZE));
  auto r = std::make_shared<GenerationRequest>();
  r->id = a.request_id;
  r->session_id = a.session_id;
  r->tokens.assign(a.tokens, a.tokens + a.num_tokens);
  r->sampling = a.sampling;
  r->max_new_tokens = a.max_new_tokens;
  r->stop_tokens.assign(a.stop_tokens, a.stop_tokens + a.num_stop_tokens);
  r->record_routed_experts = a.record_routed_experts != 0;
  r->routed_experts_from = a.routed_experts_from;
  return r;
}

inline GenerationRequest& ready_request(mlpt_engine_request* handle) {
  GenerationRequest* r = GenerationRequest::from(handle);
  if (!r->ready()) throw Error(MLPT_FAILED_PRECONDITION, "request " + std::to_string(r->id) + " is not ready");
  return *r;
}

// The 1.0/1.1 blocking call: submit, wait, copy into the caller's buffers.
inline void generate_blocking(mlpt_generate_args& a) {
  if (a.max_new_tokens >= 1 && !a.out_tokens) throw Error(MLPT_INVALID_ARGUMENT, "out_tokens is NULL");
  if (a.record_routed_experts && !a.out_routed_experts)
    throw Error(MLPT_INVALID_ARGUMENT, "record_routed_experts set but out_routed_experts is NULL");
  auto r = request_from(a);
  as_engine(a.engine)->submit(r);
  r->wait();
  if (r->error_code() != MLPT_OK) throw Error(r->error_code(), r->error_message());
  const size_t n = std::min(r->out_tokens.size(), static_cast<size_t>(std::max(a.max_new_tokens, 0)));
  std::copy(r->out_tokens.begin(), r->out_tokens.begin() + static_cast<std::ptrdiff_t>(n), a.out_tokens);
  if (a.out_logprobs && r->out_logprobs.size() >= n)
    std::copy(r->out_logprobs.begin(), r->out_logprobs.begin() + static_cast<std::ptrdiff_t>(n), a.out_logprobs);
  if (a.record_routed_experts && !r->out_routed_experts.empty()) {
    // As recorded (per layer) to the blocking call's layout, the trainer's.
    const size_t layers = r->out_routed_experts.size();
    const size_t positions = a.num_tokens + n - a.routed_experts_from;
    const size_t k = positions ? r->out_routed_experts[0].size() / positions : 0;
    routed_experts_by_position(r->routed_layer_pointers.data(), layers, positions, k, a.out_routed_experts);
  }
  a.out_num_tokens = n;
  a.out_finish_reason = r->finish_reason();
  a.out_weight_version = r->out_weight_version;
}

// engine.h, fetch_weights: receive this rank's layout, load it, release it (also on failure).
inline void fetch_and_load(mlpt_fetch_weights_args& a) {
  BoundTransport receiver(a.receiver, "receiver");
  Engine* engine = as_engine(a.engine);
  const TensorLayout want = engine->weight_layout();
  mlpt_transport_receive_args r{};
  r.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
  r.transport = receiver.endpoint();
  r.min_version = a.min_version;
  r.timeout_ms = a.timeout_ms;
  r.want_tensors = want.tensors;
  r.want_shards = want.shards;
  r.num_want = want.count;
  try {
    receiver.receive(r);
  } catch (const Error& e) {
    try {
      engine->load_refused(e);
    } catch (const Error&) {  // the receive's error says more
    }
    throw;
  }
  mlpt_load_weights_args l{};
  l.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
  l.engine = a.engine;
  l.version = r.out_version;
  l.tensors = r.out_tensors;
  l.num_tensors = r.out_num_tensors;
  l.shards = r.out_shards;
  l.ready = &r.out_ready;
  load_then_release(
      r.out_version, [&] { engine->load_weights(l); }, [&](uint64_t version) { receiver.release(version); });
  a.out_version = r.out_version;
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
          const mlpt_component_group* group =
              MLPT_HAS_FIELD(a, mlpt_engine_create_args, component_group) ? a->component_group : nullptr;
          Engine* e = nullptr;
          if constexpr (std::is_constructible_v<T, std::string_view, const mlpt_component_group*>) {
            e = new T(view(a->config_json), group);
          } else {
            if (group && group->size > 1)
              throw Error(MLPT_UNIMPLEMENTED, "this engine does not run as a group of ranks (component_group '" +
                                                  to_string(group->name) + "' of " + std::to_string(group->size) + ")");
            e = new T(view(a->config_json));
          }
          a->engine = reinterpret_cast<mlpt_engine*>(e);
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
          detail::generate_blocking(*a);
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
      // ---- 1.2 ----
      [](mlpt_engine_model_info_args* a) {
        return guard("engine.query_model_info", [&] {
          require_struct(a, MLPT_ENGINE_MODEL_INFO_ARGS_STRUCT_SIZE, "mlpt_engine_model_info_args");
          require_struct(&a->out_info, MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE, "mlpt_engine_model_info_args.out_info");
          as_engine(a->engine)->model_info(a->out_info);
        });
      },
      [](mlpt_engine_pause_args* a) {
        return guard("engine.pause_generation", [&] {
          require_struct(a, MLPT_ENGINE_PAUSE_ARGS_STRUCT_SIZE, "mlpt_engine_pause_args");
          as_engine(a->engine)->pause();
        });
      },
      [](mlpt_engine_resume_args* a) {
        return guard("engine.resume_generation", [&] {
          require_struct(a, MLPT_ENGINE_RESUME_ARGS_STRUCT_SIZE, "mlpt_engine_resume_args");
          as_engine(a->engine)->resume();
        });
      },
      [](mlpt_submit_args* a) {
        return guard("engine.submit", [&] {
          require_struct(a, MLPT_SUBMIT_ARGS_STRUCT_SIZE, "mlpt_submit_args");
          auto r = detail::request_from(*a);
          r->on_ready = a->on_ready;
          r->on_ready_user_data = a->on_ready_user_data;
          r->held_by_submitter = r;
          mlpt_engine_request* handle = r->handle();
          try {
            as_engine(a->engine)->submit(r);  // on_ready may run (and release) before this returns
          } catch (...) {
            r->held_by_submitter.reset();  // refused: no request exists
            throw;
          }
          a->out_request = handle;
        });
      },
      [](mlpt_request_is_ready_args* a) {
        return guard("engine.request_is_ready", [&] {
          require_struct(a, MLPT_REQUEST_IS_READY_ARGS_STRUCT_SIZE, "mlpt_request_is_ready_args");
          a->out_ready = GenerationRequest::from(a->request)->ready() ? 1 : 0;
        });
      },
      [](mlpt_request_await_args* a) {
        return guard("engine.request_await", [&] {
          require_struct(a, MLPT_REQUEST_AWAIT_ARGS_STRUCT_SIZE, "mlpt_request_await_args");
          GenerationRequest::from(a->request)->wait();
        });
      },
      [](mlpt_request_result_args* a) {
        return guard("engine.request_result", [&] {
          require_struct(a, MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE, "mlpt_request_result_args");
          GenerationRequest& r = detail::ready_request(a->request);
          if (r.error_code() != MLPT_OK) throw Error(r.error_code(), r.error_message());
          a->out_tokens = r.out_tokens.data();
          a->out_num_tokens = r.out_tokens.size();
          a->out_logprobs = r.out_logprobs.empty() ? nullptr : r.out_logprobs.data();
          const bool routed = r.record_routed_experts && !r.out_routed_experts.empty();
          a->out_routed_experts = routed ? r.routed_layer_pointers.data() : nullptr;
          a->out_num_routed_positions = routed ? r.tokens.size() + r.out_tokens.size() - r.routed_experts_from : 0;
          a->out_finish_reason = r.finish_reason();
          a->out_weight_version = r.out_weight_version;
        });
      },
      [](mlpt_request_release_args* a) {
        return guard("engine.request_release", [&] {
          require_struct(a, MLPT_REQUEST_RELEASE_ARGS_STRUCT_SIZE, "mlpt_request_release_args");
          auto last = std::move(detail::ready_request(a->request).held_by_submitter);  // frees it on return
        });
      },
      [](mlpt_weight_shards_args* a) {
        return guard("engine.weight_shards", [&] {
          require_struct(a, MLPT_WEIGHT_SHARDS_ARGS_STRUCT_SIZE_1_2, "mlpt_weight_shards_args");
          const TensorLayout layout = as_engine(a->engine)->weight_layout();
          a->out_tensors = layout.tensors;
          a->out_shards = layout.count ? layout.shards : nullptr;
          a->out_num_tensors = layout.count;
        });
      },
      [](mlpt_fetch_weights_args* a) {
        return guard("engine.fetch_weights", [&] {
          require_struct(a, MLPT_FETCH_WEIGHTS_ARGS_STRUCT_SIZE_1_2, "mlpt_fetch_weights_args");
          detail::fetch_and_load(*a);
        });
      },
  };
  return &api;
}

template <class T>
ComponentSpec engine_component(std::string_view name, std::string_view description,
                                const mlpt_engine_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_ENGINE, name, description, engine_api<T>(), caps);
}

}  // namespace mlpt::sdk
