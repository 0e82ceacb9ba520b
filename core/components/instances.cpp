#include "core/components/instances.hpp"

#include "core/observe/flight_recorder.hpp"
#include "core/plugin/call_scope.hpp"

#include <algorithm>
#include <future>

#include <mlpt/sdk/routed_experts.hpp>
#include <mlpt/sdk/types.hpp>

#include "core/components/abi_adapter.hpp"

namespace mlpt::components {
namespace {

using sdk::borrow;
using sdk::StringSink;  // collects a callee's output (mlpt_sink) into a string

nlohmann::json parse_output(const plugin::Component& c, const std::string& call, const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(MLPT_INTERNAL, c.name + ": " + call + " wrote invalid JSON (" + e.what() + "): " + text.substr(0, 200));
  }
}

// The request fields shared by mlpt_submit_args (1.2) and mlpt_generate_args (1.0).
template <class Args>
Args request_args(size_t struct_size, mlpt_engine* engine, const GenerateRequest& r) {
  Args a{};
  a.struct_size = struct_size;
  a.engine = engine;
  a.request_id = r.request_id;
  a.session_id = r.session_id;
  a.tokens = r.tokens->data();
  a.num_tokens = r.tokens->size();
  a.sampling = r.sampling;
  a.max_new_tokens = r.max_new_tokens;
  a.stop_tokens = r.stop_tokens.data();
  a.num_stop_tokens = r.stop_tokens.size();
  a.record_routed_experts = r.record_routed_experts ? 1 : 0;
  a.routed_experts_from = r.routed_experts_from;
  return a;
}

}  // namespace

// ---- Engine ----

Engine::Engine(plugin::Component component, const nlohmann::json& settings, int blocking_threads,
               const mlpt_component_group* group)
    : component_(std::move(component)), api_(component_.table<mlpt_engine_api>()) {
  const AbiAdapter& abi = abi_adapter(component_.abi_minor());
  async_ = MLPT_HAS_FIELD(api_, mlpt_engine_api, request_release) && api_->query_model_info && api_->pause_generation &&
           api_->resume_generation && api_->submit && api_->request_is_ready && api_->request_await &&
           api_->request_result && api_->request_release;
  if (group && group->size > 1 && !abi.component_groups)  // an older engine would ignore the group and run alone
    throw Error(MLPT_FAILED_PRECONDITION, component_.name + ": an engine group of " + std::to_string(group->size) +
                                              " ranks needs an ABI 1.2 engine; this one declares 1." +
                                              std::to_string(component_.abi_minor()));
  std::string config = settings.dump();
  mlpt_engine_create_args a{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, borrow(config), nullptr, group, nullptr};
  plugin::CallScope scope(component_, "create");
  plugin::check(component_, api_->create(&a), "engine create");
  engine_ = a.engine;
  try {
    auto info = model_info();
    moe_layers_ = info.num_moe_layers, experts_per_token_ = info.experts_per_token;
  } catch (...) {
    api_->destroy(engine_);
    throw;
  }
  if (!async_) {
    blocking_ = std::make_unique<exec::WorkerPool>(blocking_threads);
    blocking_cancels_ = std::make_unique<BlockingCancels>([this](uint64_t id) { cancel_in_engine(id); });
  }
}

Engine::~Engine() {
  blocking_.reset();  // its calls finish first
  blocking_cancels_.reset();  // and nothing cancels in the engine any more
  plugin::CallScope scope(component_, "destroy");
  api_->destroy(engine_);
}

mlpt_engine_model_info Engine::model_info() const {
  if (async_) {
    mlpt_engine_model_info_args a{};
    a.struct_size = MLPT_ENGINE_MODEL_INFO_ARGS_STRUCT_SIZE;
    a.engine = engine_;
    a.out_info.struct_size = MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE;
    plugin::CallScope scope(component_, "query_model_info");
    plugin::check(component_, api_->query_model_info(&a), "query_model_info");
    return a.out_info;
  }
  mlpt_engine_model_info info{};
  info.struct_size = MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE;
  plugin::CallScope scope(component_, "model_info");
  plugin::check(component_, api_->model_info(engine_, &info), "model_info");
  return info;
}

// What the completion callback needs: the request as asked and where the result goes.
struct Engine::Pending {
  const Engine* engine;
  GenerateRequest request;
  std::vector<int32_t> tokens;  // request.tokens points here
  GenerationDone done;
  // The request from submit to its callback, in the flight recorder: a generation that never
  // completes shows there as running.
  uint32_t in_flight = observe::FlightRecorder::kNotRecorded;
};

void Engine::submit(const GenerateRequest& r, GenerationDone done) {
  auto pending = std::make_unique<Pending>(Pending{this, r, *r.tokens, std::move(done)});
  pending->request.tokens = &pending->tokens;
  if (!async_) {
    std::shared_ptr<Pending> p(std::move(pending));
    blocking_cancels_->queued(r.request_id);
    blocking_->post([p] {
      Generation g;
      std::exception_ptr error;
      BlockingCancels& cancels = *p->engine->blocking_cancels_;
      cancels.started(p->request.request_id);
      try {
        g = p->engine->generate_blocking(p->request);
      } catch (...) {
        error = std::current_exception();
      }
      cancels.finished(p->request.request_id);
      p->done(std::move(g), error);
    });
    return;
  }
  auto a = request_args<mlpt_submit_args>(MLPT_SUBMIT_ARGS_STRUCT_SIZE, engine_, r);
  a.on_ready = &Engine::on_ready;
  a.on_ready_user_data = pending.get();
  auto& recorder = observe::FlightRecorder::instance();
  pending->in_flight = recorder.begin("engine", component_.name.c_str(), "request (submit to ready)", r.request_id);
  const uint32_t in_flight = pending->in_flight;
  mlpt_error* refused = nullptr;
  {
    plugin::CallScope scope(component_, "submit", r.request_id);
    refused = api_->submit(&a);
  }
  if (refused) {
    recorder.end(in_flight, true);
    plugin::check(component_, refused, "submit");  // throws; on_ready never runs
  }
  pending.release();  // on_ready owns it now (and may already have run)
}

void Engine::on_ready(void* user_data, mlpt_engine_request* request) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(user_data));
  Generation g;
  std::exception_ptr error;
  try {
    g = p->engine->take_result(request, p->request);
  } catch (...) {
    error = std::current_exception();
  }
  observe::FlightRecorder::instance().end(p->in_flight, error != nullptr);
  p->done(std::move(g), error);
}

// Copies a ready request's result into host memory and releases the request.
Generation Engine::take_result(mlpt_engine_request* request, const GenerateRequest& asked) const {
  struct Release {
    const Engine* e;
    mlpt_engine_request* r;
    ~Release() {
      mlpt_request_release_args a{MLPT_REQUEST_RELEASE_ARGS_STRUCT_SIZE, e->engine_, r};
      if (mlpt_error* err = e->api_->request_release(&a)) e->component_.errors().error_destroy(err);
    }
  } release{this, request};
  mlpt_request_result_args a{};
  a.struct_size = MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE;
  a.engine = engine_;
  a.request = request;
  plugin::CallScope scope(component_, "request_result", asked.request_id);
  plugin::check(component_, api_->request_result(&a), "generation " + std::to_string(asked.request_id));
  const size_t cap = static_cast<size_t>(std::max(asked.max_new_tokens, 1));
  if (a.out_num_tokens > cap)
    throw Error(MLPT_INTERNAL, component_.name + ": request_result reported " + std::to_string(a.out_num_tokens) +
                                   " tokens, more than max_new_tokens " + std::to_string(cap));
  Generation g;
  g.tokens.assign(a.out_tokens, a.out_tokens + a.out_num_tokens);
  if (a.out_logprobs) g.logprobs.assign(a.out_logprobs, a.out_logprobs + a.out_num_tokens);
  else g.logprobs.assign(a.out_num_tokens, 0.0f);
  if (asked.record_routed_experts) {
    const size_t positions = asked.tokens->size() + a.out_num_tokens - asked.routed_experts_from;
    if (!a.out_routed_experts || a.out_num_routed_positions != positions)
      throw Error(MLPT_INTERNAL, component_.name + ": request_result gave routing for " + std::to_string(a.out_num_routed_positions) +
                                     " positions, expected " + std::to_string(positions));
    // As recorded (per layer) to the trainer's layout.
    const size_t layers = static_cast<size_t>(moe_layers_), k = static_cast<size_t>(experts_per_token_);
    g.routed_experts.resize(positions * layers * k);
    sdk::routed_experts_by_position(a.out_routed_experts, layers, positions, k, g.routed_experts.data());
  }
  g.finish_reason = a.out_finish_reason;
  g.weight_version = a.out_weight_version;
  return g;
}

Generation Engine::generate(const GenerateRequest& r) {
  std::promise<Generation> result;
  auto future = result.get_future();
  submit(r, [&result](Generation&& g, std::exception_ptr error) {
    if (error) result.set_exception(error);
    else result.set_value(std::move(g));
  });
  return future.get();
}

// The 1.0/1.1 call: the caller's buffers must hold the worst case (max_new_tokens, and routing for
// every position up to num_tokens + max_new_tokens).
Generation Engine::generate_blocking(const GenerateRequest& r) const {
  Generation g;
  const size_t cap = static_cast<size_t>(std::max(r.max_new_tokens, 1));
  g.tokens.resize(cap);
  g.logprobs.resize(cap);
  auto a = request_args<mlpt_generate_args>(MLPT_GENERATE_ARGS_STRUCT_SIZE, engine_, r);
  a.out_tokens = g.tokens.data();
  a.out_logprobs = g.logprobs.data();
  const size_t per_position = static_cast<size_t>(moe_layers_ * experts_per_token_);
  if (r.record_routed_experts) {
    g.routed_experts.resize((r.tokens->size() + cap - r.routed_experts_from) * per_position);
    a.out_routed_experts = g.routed_experts.data();
  }
  plugin::CallScope scope(component_, "generate", r.request_id);
  plugin::check(component_, api_->generate(&a), "generate");
  if (a.out_num_tokens > cap)
    throw Error(MLPT_INTERNAL, component_.name + ": generate reported " + std::to_string(a.out_num_tokens) +
                                   " tokens, more than max_new_tokens " + std::to_string(cap));
  g.tokens.resize(a.out_num_tokens);
  g.logprobs.resize(a.out_num_tokens);
  if (r.record_routed_experts) g.routed_experts.resize((r.tokens->size() + a.out_num_tokens - r.routed_experts_from) * per_position);
  g.finish_reason = a.out_finish_reason;
  g.weight_version = a.out_weight_version;
  return g;
}

void Engine::cancel(uint64_t request_id) {
  if (blocking_cancels_)
    blocking_cancels_->cancel(request_id);
  else
    cancel_in_engine(request_id);
}

void Engine::cancel_in_engine(uint64_t request_id) {
  mlpt_cancel_args a{MLPT_CANCEL_ARGS_STRUCT_SIZE, engine_, request_id};
  plugin::CallScope scope(component_, "cancel", request_id);
  plugin::check(component_, api_->cancel(&a), "cancel");
}

void Engine::session_release(uint64_t session_id) {
  mlpt_session_release_args a{MLPT_SESSION_RELEASE_ARGS_STRUCT_SIZE, engine_, session_id};
  plugin::CallScope scope(component_, "session_release", session_id);
  plugin::check(component_, api_->session_release(&a), "session_release");
}

void Engine::pause() {
  if (!async_) {
    plugin::CallScope scope(component_, "pause");
    return plugin::check(component_, api_->pause(engine_), "pause");
  }
  mlpt_engine_pause_args a{MLPT_ENGINE_PAUSE_ARGS_STRUCT_SIZE, engine_};
  plugin::CallScope scope(component_, "pause_generation");
  plugin::check(component_, api_->pause_generation(&a), "pause_generation");
}

void Engine::resume() {
  if (!async_) {
    plugin::CallScope scope(component_, "resume");
    return plugin::check(component_, api_->resume(engine_), "resume");
  }
  mlpt_engine_resume_args a{MLPT_ENGINE_RESUME_ARGS_STRUCT_SIZE, engine_};
  plugin::CallScope scope(component_, "resume_generation");
  plugin::check(component_, api_->resume_generation(&a), "resume_generation");
}

void Engine::load_weights(uint64_t version, const mlpt_named_tensor* tensors, size_t count, const mlpt_tensor_shard* shards,
                          const mlpt_device_ready* ready) {
  mlpt_load_weights_args a{MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE, engine_, version, tensors, count, nullptr, shards, ready};
  plugin::CallScope scope(component_, "load_weights");
  plugin::check(component_, api_->load_weights(&a), "load_weights");
}

bool Engine::fetches() const { return MLPT_HAS_FIELD(api_, mlpt_engine_api, fetch_weights) && api_->fetch_weights; }

uint64_t Engine::fetch_weights(const Transport& receiver, uint64_t min_version, int64_t timeout_ms) {
  mlpt_fetch_weights_args a{};
  a.struct_size = MLPT_FETCH_WEIGHTS_ARGS_STRUCT_SIZE;
  a.engine = engine_;
  a.receiver = receiver.binding();
  a.min_version = min_version;
  a.timeout_ms = timeout_ms;
  plugin::CallScope scope(component_, "fetch_weights");
  plugin::check(component_, api_->fetch_weights(&a), "fetch_weights version >= " + std::to_string(min_version));
  return a.out_version;
}

const sdk::TensorLayout& Engine::weight_shards() {
  if (shards_) return *shards_;
  shards_.emplace();
  if (!MLPT_HAS_FIELD(api_, mlpt_engine_api, weight_shards) || !api_->weight_shards) return *shards_;
  mlpt_weight_shards_args a{MLPT_WEIGHT_SHARDS_ARGS_STRUCT_SIZE, engine_, nullptr, nullptr, 0, nullptr};
  plugin::CallScope scope(component_, "weight_shards");
  plugin::check(component_, api_->weight_shards(&a), "weight_shards");
  if (a.out_num_tensors > 0 && (!a.out_tensors || !a.out_shards))
    throw Error(MLPT_INTERNAL, "engine " + component_.name + ": weight_shards returned " + std::to_string(a.out_num_tensors) +
                                   " shards without their tensors or descriptors");
  *shards_ = sdk::TensorLayout{a.out_tensors, a.out_shards, a.out_num_tensors};
  return *shards_;
}

// ---- Trainer ----

Trainer::Trainer(plugin::Component component, const nlohmann::json& settings, const mlpt_component_group* group)
    : component_(std::move(component)), api_(component_.table<mlpt_trainer_api>()) {
  std::string config = settings.dump();
  mlpt_trainer_create_args a{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, borrow(config), nullptr, group, nullptr, 0, 0};
  plugin::CallScope scope(component_, "create");
  plugin::check(component_, api_->create(&a), "trainer create");
  trainer_ = a.trainer;
  const int group_rank = group ? group->rank : 0, group_size = group ? group->size : 1;
  data_parallel_ = {group_rank, group_size};
  if (a.out_data_parallel_size == 0 && a.out_data_parallel_rank == 0) return;  // a replica of its own
  const int rank = a.out_data_parallel_rank, size = a.out_data_parallel_size;
  if (size < 1 || rank < 0 || rank >= size || group_size % size != 0) {
    api_->destroy(trainer_);
    throw Error(MLPT_INTERNAL, "trainer " + component_.name + " rank " + std::to_string(group_rank) + " of " + std::to_string(group_size) +
                                   ": create reported data-parallel replica " + std::to_string(rank) + " of " + std::to_string(size) +
                                   " (trainer.h: 0 <= out_data_parallel_rank < out_data_parallel_size, which divides the group's size)");
  }
  data_parallel_ = {rank, size};
}

Trainer::~Trainer() { plugin::CallScope scope(component_, "destroy"); api_->destroy(trainer_); }

std::vector<Metric> Trainer::train_step(const mlpt_train_batch& batch, uint64_t* new_version, int64_t global_num_loss_tokens) {
  mlpt_train_step_args a{};
  a.struct_size = MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE;
  a.trainer = trainer_;
  a.batch = &batch;
  a.global_num_loss_tokens = global_num_loss_tokens;
  plugin::CallScope scope(component_, "train_step");
  plugin::check(component_, api_->train_step(&a), "train_step");
  std::vector<Metric> out;
  for (size_t i = 0; i < a.out_num_metrics; ++i) {
    const auto& m = a.out_metrics[i];
    out.push_back({std::string(m.name.data, m.name.size), m.value});
  }
  if (new_version) *new_version = a.out_weight_version;
  return out;
}

std::vector<float> Trainer::compute_logprobs(const mlpt_train_batch& batch) {
  std::vector<float> out(static_cast<size_t>(batch.offsets[batch.num_sequences]));
  mlpt_compute_logprobs_args a{MLPT_COMPUTE_LOGPROBS_ARGS_STRUCT_SIZE, trainer_, &batch, out.data()};
  plugin::CallScope scope(component_, "compute_logprobs");
  plugin::check(component_, api_->compute_logprobs(&a), "compute_logprobs");
  return out;
}

Trainer::Weights Trainer::export_weights() {
  mlpt_export_weights_args a{};
  a.struct_size = MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE;
  a.trainer = trainer_;
  plugin::CallScope scope(component_, "export_weights");
  plugin::check(component_, api_->export_weights(&a), "export_weights");
  Weights w{a.out_tensors, a.out_num_tensors, a.out_weight_version, a.out_shards, a.out_ready};
  if (w.ready.kind != MLPT_READY_ON_RETURN && w.ready.kind != MLPT_READY_AFTER_EVENT)
    throw Error(MLPT_INTERNAL, component_.name + ": export_weights gave an unknown readiness kind " + std::to_string(w.ready.kind));
  return w;
}

bool Trainer::publishes() const { return MLPT_HAS_FIELD(api_, mlpt_trainer_api, publish_weights) && api_->publish_weights; }

Trainer::Published Trainer::publish_weights(const Transport& sender, int64_t timeout_ms) {
  return publish_weights(*sender.binding(), timeout_ms);
}

Trainer::Published Trainer::publish_weights(const mlpt_transport_binding& sender, int64_t timeout_ms) {
  mlpt_publish_weights_args a{};
  a.struct_size = MLPT_PUBLISH_WEIGHTS_ARGS_STRUCT_SIZE;
  a.trainer = trainer_;
  a.sender = &sender;
  a.timeout_ms = timeout_ms;
  plugin::CallScope scope(component_, "publish_weights");
  plugin::check(component_, api_->publish_weights(&a), "publish_weights");
  return Published{a.out_weight_version, a.out_bytes};
}

bool Trainer::can_save_state() const {
  return capabilities().supports_state_save && api_->save_state && api_->load_state;
}

void Trainer::save_state(const std::string& dir) {
  if (!can_save_state()) throw Error(MLPT_UNIMPLEMENTED, component_.name + " cannot save its training state");
  mlpt_trainer_state_args a{MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE, trainer_, borrow(dir)};
  plugin::CallScope scope(component_, "save_state");
  plugin::check(component_, api_->save_state(&a), "save_state " + dir);
}

void Trainer::load_state(const std::string& dir) {
  if (!can_save_state()) throw Error(MLPT_UNIMPLEMENTED, component_.name + " cannot load a training state");
  mlpt_trainer_state_args a{MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE, trainer_, borrow(dir)};
  plugin::CallScope scope(component_, "load_state");
  plugin::check(component_, api_->load_state(&a), "load_state " + dir);
}

// ---- Transport ----

Transport::Transport(plugin::Component component, const nlohmann::json& settings, mlpt_transport_role role,
                     const std::string& group, const mlpt_component_group* ranks, const mlpt_extension* extensions)
    : component_(std::move(component)),
      api_(component_.table<mlpt_transport_api>()),
      abi_(&abi_adapter(component_.abi_minor())) {
  std::string config = settings.dump();
  mlpt_transport_create_args a{MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE, borrow(config), role, borrow(group), nullptr, ranks, extensions};
  if (ranks && ranks->size > 1 && role == MLPT_TRANSPORT_SENDER) {
    const auto* caps = component_.caps<mlpt_transport_capabilities>();
    const int32_t most = MLPT_HAS_FIELD(caps, mlpt_transport_capabilities, max_sender_ranks) && caps->max_sender_ranks > 0
                             ? caps->max_sender_ranks : 1;
    if (ranks->size > most)
      throw Error(MLPT_INVALID_ARGUMENT, "transport " + component_.name + " takes at most " + std::to_string(most) +
                                             " sender ranks (capabilities.max_sender_ranks), and the trainer publishes from " +
                                             std::to_string(ranks->size) + " ranks, each holding a part of the model");
  }
  plugin::CallScope scope(component_, "create");
  plugin::check(component_, api_->create(&a), role == MLPT_TRANSPORT_SENDER ? "sender create" : "receiver create");
  transport_ = a.transport;
  binding_ = mlpt_transport_binding{MLPT_TRANSPORT_BINDING_STRUCT_SIZE, api_, &component_.errors(), transport_};
}

Transport::~Transport() { plugin::CallScope scope(component_, "destroy"); api_->destroy(transport_); }

void Transport::send(uint64_t version, const mlpt_named_tensor* tensors, size_t count, int64_t timeout_ms,
                     const mlpt_tensor_shard* shards, const mlpt_device_ready* ready) {
  mlpt_transport_send_args a{abi_->transport_send_args_size, transport_, version, tensors, count, timeout_ms, nullptr, shards, ready};
  if (ready && ready->kind != MLPT_READY_ON_RETURN && !abi_->device_ready)
    throw Error(MLPT_UNIMPLEMENTED, "transport " + component_.name + " speaks ABI 1." + std::to_string(component_.abi_minor()) +
                                        " and cannot wait for the trainer's device event (ABI 1.2): export ready on return");
  for (size_t i = 0; shards && !abi_->shards && i < count; ++i)
    if (shards[i].offsets || shards[i].global_shape)  // a descriptor the transport would not read
      throw Error(MLPT_UNIMPLEMENTED, "transport " + component_.name + " speaks ABI 1." + std::to_string(component_.abi_minor()) +
                                          " and carries whole tensors only; the trainer sent shards (ABI 1.2)");
  plugin::CallScope scope(component_, "send");
  plugin::check(component_, api_->send(&a), "send version " + std::to_string(version));
}

Transport::Received Transport::receive(uint64_t min_version, int64_t timeout_ms, const sdk::TensorLayout& want) {
  mlpt_transport_receive_args a{};
  a.struct_size = abi_->transport_receive_args_size;
  a.transport = transport_;
  a.min_version = min_version;
  a.timeout_ms = timeout_ms;
  a.want_tensors = want.tensors, a.want_shards = want.shards, a.num_want = want.count;
  if (want.count > 0 && !abi_->shards)
    throw Error(MLPT_UNIMPLEMENTED, "transport " + component_.name + " speaks ABI 1." + std::to_string(component_.abi_minor()) +
                                        " and cannot deliver the shards the engine holds (ABI 1.2)");
  plugin::CallScope scope(component_, "receive");
  plugin::check(component_, api_->receive(&a), "receive version >= " + std::to_string(min_version));
  // An older transport never wrote out_shards and out_ready: they are as zeroed above.
  return Received{a.out_version, a.out_tensors, a.out_num_tensors, abi_->shards ? a.out_shards : nullptr,
                  abi_->device_ready ? a.out_ready : mlpt_device_ready{}};
}

void Transport::release(uint64_t version) {
  plugin::CallScope scope(component_, "release");
  plugin::check(component_, abi_->transport_release(*api_, transport_, version), "release version " + std::to_string(version));
}

// ---- Sandbox runtime ----

SandboxRuntime::SandboxRuntime(plugin::Component component, const nlohmann::json& settings)
    : component_(std::move(component)), api_(component_.table<mlpt_sandbox_api>()) {
  std::string config = settings.dump();
  mlpt_sandbox_runtime_create_args a{};
  a.struct_size = MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE;
  a.config_json = borrow(config);
  plugin::CallScope scope(component_, "runtime_create");
  plugin::check(component_, api_->runtime_create(&a), "runtime create");
  runtime_ = a.runtime;
  runtime_name_.assign(a.out_runtime_name.data ? a.out_runtime_name.data : "", a.out_runtime_name.size);
  binding_ = mlpt_sandbox_binding{MLPT_SANDBOX_BINDING_STRUCT_SIZE, api_, &component_.errors(), runtime_};
}

SandboxRuntime::~SandboxRuntime() { plugin::CallScope scope(component_, "runtime_destroy"); api_->runtime_destroy(runtime_); }

std::unique_ptr<SandboxRuntime::Sandbox> SandboxRuntime::create(const std::string& image, int64_t memory_limit_mb,
                                                                int64_t max_processes) const {
  return std::make_unique<Sandbox>(&binding_, image, memory_limit_mb, max_processes, HostCalls{&component_});
}

// ---- Reward ----

Reward::Reward(plugin::Component component, const nlohmann::json& settings)
    : component_(std::move(component)), api_(component_.table<mlpt_reward_api>()) {
  std::string config = settings.dump();
  mlpt_reward_create_args a{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, borrow(config), nullptr};
  plugin::CallScope scope(component_, "create");
  plugin::check(component_, api_->create(&a), "reward create");
  reward_ = a.reward;
}

Reward::~Reward() { plugin::CallScope scope(component_, "destroy"); api_->destroy(reward_); }

Grade Reward::grade(const std::string& task_json, const std::string& result_json, mlpt_episode_end end,
                    const mlpt_sandbox_binding* binding) {
  StringSink details;
  mlpt_grade_args a{};
  a.struct_size = MLPT_GRADE_ARGS_STRUCT_SIZE;
  a.reward = reward_;
  a.task_json = borrow(task_json);
  a.result_json = borrow(result_json);
  a.episode_end = end;
  a.binding = binding;
  a.details = details.sink();
  plugin::CallScope scope(component_, "grade");
  plugin::check(component_, api_->grade(&a), "grade");
  Grade g{a.out_reward, a.out_flags, nullptr};
  if (!details.text().empty()) g.details = nlohmann::json::parse(details.text(), nullptr, false);
  if (g.details.is_discarded()) g.details = {{"reason", details.text()}};
  return g;
}

// ---- Harness ----

Harness::Harness(plugin::Component component, const nlohmann::json& settings)
    : component_(std::move(component)), api_(component_.table<mlpt_harness_api>()) {
  std::string config = settings.dump();
  mlpt_harness_create_args a{MLPT_HARNESS_CREATE_ARGS_STRUCT_SIZE, borrow(config), nullptr};
  plugin::CallScope scope(component_, "create");
  plugin::check(component_, api_->create(&a), "harness create");
  harness_ = a.harness;
}

Harness::~Harness() { plugin::CallScope scope(component_, "destroy"); api_->destroy(harness_); }

std::unique_ptr<Harness::Episode> Harness::start(const std::string& task_json, const mlpt_sandbox_binding* binding,
                                                 mlpt_sandbox* sandbox) {
  StringSink out;
  mlpt_episode_start_args a{};
  a.struct_size = MLPT_EPISODE_START_ARGS_STRUCT_SIZE;
  a.harness = harness_;
  a.task_json = borrow(task_json);
  a.binding = binding;
  a.sandbox = sandbox;
  a.out = out.sink();
  plugin::CallScope scope(component_, "episode_start");
  plugin::check(component_, api_->episode_start(&a), "episode_start");
  std::unique_ptr<Episode> episode(new Episode(*this, a.episode, nlohmann::json()));
  episode->start_ = parse_output(component_, "episode_start", out.text());
  // Parsed again in order: the tool schemas' key order is part of the rendered prompt's tokens.
  if (episode->start_.is_object() && episode->start_.contains("tools"))
    episode->tools_ = nlohmann::ordered_json::parse(out.text())["tools"];
  return episode;
}

Harness::Episode::~Episode() { plugin::CallScope scope(harness_->component_, "episode_destroy"); harness_->api_->episode_destroy(episode_); }

nlohmann::json Harness::Episode::step(const nlohmann::json& reply) {
  StringSink out;
  std::string text = reply.dump();
  mlpt_episode_step_args a{MLPT_EPISODE_STEP_ARGS_STRUCT_SIZE, episode_, borrow(text), out.sink()};
  plugin::CallScope scope(harness_->component_, "episode_step");
  plugin::check(harness_->component_, harness_->api_->episode_step(&a), "episode_step");
  return parse_output(harness_->component_, "episode_step", out.text());
}

nlohmann::json Harness::Episode::finish(mlpt_episode_end end) {
  StringSink out;
  mlpt_episode_finish_args a{MLPT_EPISODE_FINISH_ARGS_STRUCT_SIZE, episode_, end, out.sink()};
  plugin::CallScope scope(harness_->component_, "episode_finish");
  plugin::check(harness_->component_, harness_->api_->episode_finish(&a), "episode_finish");
  return parse_output(harness_->component_, "episode_finish", out.text());
}

}  // namespace mlpt::components
