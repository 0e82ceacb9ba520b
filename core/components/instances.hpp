// Host-side owners of component instances: each class creates one instance from a loaded component
// and its settings, calls its C table with typed C++ methods (errors become mlpt::Error naming the
// component and call), and destroys the instance when it goes. The loop uses only these.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/components/abi_adapter.hpp"
#include "core/components/blocking_cancels.hpp"
#include "core/error.hpp"
#include "core/exec/executor.hpp"
#include "core/plugin/call_scope.hpp"
#include "core/plugin/plugin.hpp"
#include "mlpt/engine.h"
#include "mlpt/harness.h"
#include "mlpt/reward.h"
#include "mlpt/sandbox.h"
#include "mlpt/trainer.h"
#include "mlpt/transport.h"
#include <mlpt/sdk/reshard.hpp>
#include <mlpt/sdk/sandbox_client.hpp>

namespace mlpt::components {

// ---- Engine ----

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  // [position][layer][k] from routed_experts_from to the end, when recorded (the trainer's layout)
  std::vector<int16_t> routed_experts;
  mlpt_finish_reason finish_reason = MLPT_FINISH_STOP;
  uint64_t weight_version = 0;
};

struct GenerateRequest {
  uint64_t request_id = 0, session_id = 0;
  const std::vector<int32_t>* tokens = nullptr;
  mlpt_sampling_params sampling{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, 0};
  int32_t max_new_tokens = 1;
  std::vector<int32_t> stop_tokens;
  bool record_routed_experts = false;
  size_t routed_experts_from = 0;
};

// Completes an asynchronous generation: the result, or the error (then `generation` is empty).
using GenerationDone = std::function<void(Generation&& generation, std::exception_ptr error)>;

// An engine instance. Generation is asynchronous whatever the plugin's ABI: a 1.2 engine's own
// `submit` completes requests through its callback; an older engine's blocking `generate` runs on
// `blocking_threads` host threads (so at most that many of its requests run, and batch, at once).
class Engine {
 public:
  // `group`: the engine group this instance is one rank of (engine.h, Engine groups); NULL: alone.
  Engine(plugin::Component component, const nlohmann::json& settings, int blocking_threads = 16,
         const mlpt_component_group* group = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const mlpt_engine_capabilities& capabilities() const { return *component_.caps<mlpt_engine_capabilities>(); }
  // The plugin's table has the 1.2 asynchronous functions.
  bool asynchronous() const { return async_; }
  mlpt_engine_model_info model_info() const;
  // Starts a generation; `done` runs exactly once with the result or the error, on an engine thread,
  // a blocking-call thread, or inside this call; it must not block. Throws when the engine refuses
  // the request at once (then `done` never runs). `request.tokens` is copied. Thread-safe.
  void submit(const GenerateRequest& request, GenerationDone done);
  Generation generate(const GenerateRequest& request);  // submit and wait; thread-safe
  // Stops a request in flight. An older engine's is cancelled again until its generate returns: it
  // learns the id only inside generate (blocking_cancels.hpp).
  void cancel(uint64_t request_id);
  void session_release(uint64_t session_id);
  void pause();
  void resume();
  // Hands the engine tensors to load (`shards` parallel to them, NULL: whole): the 1.0/1.1 way, and
  // `mlpt serve`'s.
  void load_weights(uint64_t version, const mlpt_named_tensor* tensors, size_t count, const mlpt_tensor_shard* shards = nullptr,
                    const mlpt_device_ready* ready = nullptr);
  // The engine fetches a version >= min_version through `receiver` and loads it (ABI 1.2); only when
  // fetches() and the receiver is bindable().
  bool fetches() const;
  uint64_t fetch_weights(const class Transport& receiver, uint64_t min_version, int64_t timeout_ms);
  // The shards this engine rank holds (asked once); count 0 when it takes whole tensors.
  const sdk::TensorLayout& weight_shards();
  const plugin::Component& component() const { return component_; }

 private:
  struct Pending;
  static void on_ready(void* pending, mlpt_engine_request* request);
  Generation take_result(mlpt_engine_request* request, const GenerateRequest& asked) const;
  Generation generate_blocking(const GenerateRequest& request) const;  // the 1.0/1.1 call
  void cancel_in_engine(uint64_t request_id);

  plugin::Component component_;

  const mlpt_engine_api* api_;
  mlpt_engine* engine_ = nullptr;
  bool async_ = false;
  int64_t moe_layers_ = 0, experts_per_token_ = 0;
  std::unique_ptr<exec::WorkerPool> blocking_;  // only for engines without submit
  std::unique_ptr<BlockingCancels> blocking_cancels_;  // their cancels (blocking_cancels.hpp)
  std::optional<sdk::TensorLayout> shards_;
};

// ---- Trainer ----

struct Metric {
  std::string name;
  double value;
};

class Trainer {
 public:
  // `group`: the trainer group this instance is one rank of (ABI 1.2); NULL: a group of one.
  Trainer(plugin::Component component, const nlohmann::json& settings, const mlpt_component_group* group = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  const mlpt_trainer_capabilities& capabilities() const { return *component_.caps<mlpt_trainer_capabilities>(); }
  // The data-parallel replica this rank belongs to (trainer.h, out_data_parallel_rank): the ranks
  // of one replica train the same batch share. A trainer that left it 0 is a replica of its own.
  struct DataParallel {
    int rank = 0, size = 1;
  };
  DataParallel data_parallel() const { return data_parallel_; }
  // `global_num_loss_tokens`: N_tok of the whole global batch when `batch` is this rank's share
  // (0: `batch` is the whole batch).
  std::vector<Metric> train_step(const mlpt_train_batch& batch, uint64_t* new_version, int64_t global_num_loss_tokens = 0);
  std::vector<float> compute_logprobs(const mlpt_train_batch& batch);
  // Valid until the next train_step / load_state / destruction.
  struct Weights {
    const mlpt_named_tensor* tensors;
    size_t count;
    uint64_t version;
    const mlpt_tensor_shard* shards;  // parallel to tensors; NULL: whole tensors
    mlpt_device_ready ready;          // when device data may be read (zeroed: on return)
  };
  Weights export_weights();
  // The trainer sends this rank's weights through `sender` itself (ABI 1.2); only when publishes()
  // and the sender is bindable(). Returns the version and the bytes published.
  bool publishes() const;
  struct Published {
    uint64_t version = 0, bytes = 0;
  };
  Published publish_weights(const class Transport& sender, int64_t timeout_ms);
  // The same through a binding the host made itself (a sender endpoint of its own).
  Published publish_weights(const mlpt_transport_binding& sender, int64_t timeout_ms);
  bool can_save_state() const;
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);

 private:
  plugin::Component component_;
  const mlpt_trainer_api* api_;
  mlpt_trainer* trainer_ = nullptr;
  DataParallel data_parallel_;
};

// ---- Transport ----

// One endpoint. `group`: the sender ranks this endpoint is one of (ABI 1.2); NULL: one sender.
// `extensions`: the create args' chain (e.g. the endpoint a wrapper wraps), outliving the endpoint.
class Transport {
 public:
  Transport(plugin::Component component, const nlohmann::json& settings, mlpt_transport_role role,
            const std::string& group, const mlpt_component_group* ranks = nullptr,
            const mlpt_extension* extensions = nullptr);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // `shards` parallel to `tensors`; NULL: whole tensors.
  void send(uint64_t version, const mlpt_named_tensor* tensors, size_t count, int64_t timeout_ms,
            const mlpt_tensor_shard* shards = nullptr, const mlpt_device_ready* ready = nullptr);
  struct Received {
    uint64_t version;
    const mlpt_named_tensor* tensors;
    size_t count;
    const mlpt_tensor_shard* shards;  // parallel to tensors; NULL: whole
    mlpt_device_ready ready;          // when device data may be read (zeroed: on return)
  };
  // `want`: the layout wanted (transport.h, Receive; count 0: whole tensors); a transport older than
  // 1.2 gives whole.
  Received receive(uint64_t min_version, int64_t timeout_ms, const sdk::TensorLayout& want = {});
  void release(uint64_t version);
  // The endpoint can be handed to a trainer or engine (transport.h, Binding): its plugin speaks 1.2.
  bool bindable() const { return abi_->bindings; }
  const mlpt_transport_binding* binding() const { return &binding_; }
  const plugin::Component& component() const { return component_; }

 private:
  plugin::Component component_;
  const mlpt_transport_api* api_;
  const AbiAdapter* abi_;  // how this transport's version is called
  mlpt_transport* transport_ = nullptr;
  mlpt_transport_binding binding_{};
};

// ---- Sandbox runtime ----

class SandboxRuntime {
 public:
  SandboxRuntime(plugin::Component component, const nlohmann::json& settings);
  ~SandboxRuntime();
  SandboxRuntime(const SandboxRuntime&) = delete;
  SandboxRuntime& operator=(const SandboxRuntime&) = delete;

  const std::string& runtime_name() const { return runtime_name_; }
  const mlpt_sandbox_capabilities& capabilities() const { return *component_.caps<mlpt_sandbox_capabilities>(); }
  // What harnesses and rewards are given; lives as long as this object.
  const mlpt_sandbox_binding* binding() const { return &binding_; }

  // How the host's sandbox client reports: mlpt::Error naming the component, calls marked for the
  // crash guard.
  struct HostCalls {
    const plugin::Component* component = nullptr;
    [[noreturn]] void fail(mlpt_error_code code, std::string message) const { throw Error(code, component->name + ": " + message); }
    template <class F>
    void call(const char* function, F&& f) const {
      plugin::CallScope scope(*component, function);
      f();
    }
  };
  // One sandbox, destroyed with the returned object: the SDK's client (the one plugins use too).
  using Sandbox = sdk::SandboxClient<HostCalls>;
  std::unique_ptr<Sandbox> create(const std::string& image, int64_t memory_limit_mb = 0, int64_t max_processes = 0) const;

 private:
  plugin::Component component_;
  const mlpt_sandbox_api* api_;
  mlpt_sandbox_runtime* runtime_ = nullptr;
  std::string runtime_name_;
  mlpt_sandbox_binding binding_{};
};

// ---- Reward ----

struct Grade {
  double reward = 0;
  uint32_t flags = 0;
  nlohmann::json details;  // {"reason": ..., ...} as the reward wrote it (null if not JSON)
};

class Reward {
 public:
  Reward(plugin::Component component, const nlohmann::json& settings);
  ~Reward();
  Reward(const Reward&) = delete;
  Reward& operator=(const Reward&) = delete;

  const mlpt_reward_capabilities& capabilities() const { return *component_.caps<mlpt_reward_capabilities>(); }
  Grade grade(const std::string& task_json, const std::string& result_json, mlpt_episode_end end,
              const mlpt_sandbox_binding* binding);  // thread-safe

 private:
  plugin::Component component_;
  const mlpt_reward_api* api_;
  mlpt_reward* reward_ = nullptr;
};

// ---- Harness ----

class Harness {
 public:
  Harness(plugin::Component component, const nlohmann::json& settings);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  const mlpt_harness_capabilities& capabilities() const { return *component_.caps<mlpt_harness_capabilities>(); }

  class Episode {
   public:
    ~Episode();
    Episode(const Episode&) = delete;
    Episode& operator=(const Episode&) = delete;
    const nlohmann::json& start() const { return start_; }  // {"messages": [...], "tools": [...]}
    // The start's tools with their keys in the harness's order (the prompt renders them so).
    const nlohmann::ordered_json& tools() const { return tools_; }
    nlohmann::json step(const nlohmann::json& reply);       // {"messages", "done", "finish_reason"}
    nlohmann::json finish(mlpt_episode_end end);            // {"patch", "answer", ...}

   private:
    friend class Harness;
    Episode(const Harness& h, mlpt_harness_episode* e, nlohmann::json start) : harness_(&h), episode_(e), start_(std::move(start)) {}
    const Harness* harness_;
    mlpt_harness_episode* episode_;
    nlohmann::json start_;
    nlohmann::ordered_json tools_ = nlohmann::ordered_json::array();
  };
  std::unique_ptr<Episode> start(const std::string& task_json, const mlpt_sandbox_binding* binding,
                                 mlpt_sandbox* sandbox);

 private:
  plugin::Component component_;
  const mlpt_harness_api* api_;
  mlpt_harness* harness_ = nullptr;
};

}  // namespace mlpt::components
