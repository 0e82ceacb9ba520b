// Plugin mlpt_engine_http: component engine "http", an inference server (vLLM, SGLang or
// `mlpt serve`) as the engine, over its OpenAI-compatible completions API with token ids.
//
// Requests queue here and go out on `connections` keep-alive connections, one thread each: many
// requests in flight for the host (ABI 1.2 submit), at most `connections` of them at the server at
// once, which batches them. Pause and resume call the server's own endpoints; cancel drops a queued
// request here and asks the server to abort a sent one (it answers with the tokens so far); weights
// go to the server through a safetensors file and its /update_weights_from_disk endpoint. A server
// that is down, closes the connection or is slow fails the request (never a hang) with an error
// naming the URL and the setting whose time ran out. Settings: settings.hpp and README.md.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <mlpt/sdk.hpp>

#include "completion_protocol.hpp"
#include "server_connection.hpp"
#include "settings.hpp"
#include "weights_file.hpp"

namespace mlpt::engine_http {
namespace {

using nlohmann::json;
using sdk::Error;
using sdk::GenerationRequest;

class HttpEngine final : public sdk::Engine {
 public:
  explicit HttpEngine(std::string_view config_json) : settings_(parse_settings(config_json)), control_(settings_.url, settings_.connect_timeout_s) {
    static std::atomic<int> instances{0};
    const int instance = instances++;
    rid_prefix_ = "mlpt-" + std::to_string(::getpid()) + "-" + std::to_string(instance) + "-";
    if (settings_.weights_dir.empty()) {
      owned_weights_dir_ = std::filesystem::temp_directory_path() / ("mlpt-engine-http-" + std::to_string(::getpid()) + "-" + std::to_string(instance));
      settings_.weights_dir = owned_weights_dir_.string();
    }
    wait_until_healthy();
    read_model();
    for (int i = 0; i < settings_.connections; ++i) {
      connections_.push_back(std::make_unique<ServerConnection>(settings_.url, settings_.connect_timeout_s));
      workers_.emplace_back([this, i] { work(static_cast<size_t>(i)); });
    }
    workers_.emplace_back([this] { abort_sent(); });
  }

  ~HttpEngine() override {
    {
      std::lock_guard l(mutex_);
      stopping_ = true;
    }
    work_changed_.notify_all();
    abort_wanted_.notify_all();
    control_.interrupt();
    for (auto& c : connections_) c->interrupt();
    for (auto& w : workers_) w.join();
    if (!owned_weights_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(owned_weights_dir_, ignored);
    }
  }

  void model_info(mlpt_engine_model_info& info) override {
    info.vocab_size = vocab_size_;
    info.num_moe_layers = shape_.num_moe_layers;
    info.experts_per_token = shape_.experts_per_token;
    info.max_sequence_length = max_sequence_length_;
    info.weight_version = version_.load();
  }

  void submit(std::shared_ptr<GenerationRequest> request) override {
    if (request->max_new_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "engine http: max_new_tokens must be >= 1");
    if (request->record_routed_experts && shape_.num_moe_layers <= 0)
      throw Error(MLPT_INVALID_ARGUMENT, "engine http: routed experts asked for, but the model at " + settings_.url + " has no MoE layers");
    if (request->routed_experts_from > request->tokens.size())
      throw Error(MLPT_INVALID_ARGUMENT, "engine http: routed_experts_from is past the prompt");
    {
      std::lock_guard l(mutex_);
      if (running_.count(request->id)) throw Error(MLPT_INVALID_ARGUMENT, "engine http: request " + std::to_string(request->id) + " is already in flight");
      for (const auto& q : queue_)
        if (q->id == request->id) throw Error(MLPT_INVALID_ARGUMENT, "engine http: request " + std::to_string(request->id) + " is already in flight");
      queue_.push_back(std::move(request));
    }
    work_changed_.notify_one();
  }

  void cancel(uint64_t request_id) override {
    std::shared_ptr<GenerationRequest> queued;
    std::string rid;
    size_t worker = 0;
    {
      std::lock_guard l(mutex_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if ((*it)->id == request_id) {
          queued = std::move(*it);
          queue_.erase(it);
          break;
        }
      if (auto it = running_.find(request_id); !queued && it != running_.end()) rid = it->second.rid, worker = it->second.worker;
    }
    if (queued) {  // never sent: it ends here, nothing generated
      queued->out_weight_version = version_.load();
      queued->finish(MLPT_FINISH_CANCELLED);
      return;
    }
    if (rid.empty()) return;  // unknown or finished: not an error
    {  // told to the server by the aborter thread: cancel may run inside on_ready and must not block
      std::lock_guard l(mutex_);
      aborts_.push_back({rid, worker});
    }
    abort_wanted_.notify_one();
  }

  void session_release(uint64_t) override {}  // no sessions (keeps_sessions = 0)

  void pause() override {
    std::lock_guard c(control_mutex_);
    {
      std::lock_guard l(mutex_);
      if (paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine http: already paused (pause does not nest)");
      paused_ = true;  // queued requests stay here until resume
    }
    try {  // the server finishes what runs there, and holds what arrives until resume
      if (settings_.api == "sglang") control_.post("/pause_generation", {{"mode", "retract"}}, control_deadline());
      else control_.post("/pause?mode=wait", json::object(), control_deadline());
    } catch (...) {
      std::lock_guard l(mutex_);
      paused_ = false;
      throw;
    }
  }

  void resume() override {
    std::lock_guard c(control_mutex_);
    {
      std::lock_guard l(mutex_);
      if (!paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine http: not paused");
    }
    control_.post(settings_.api == "sglang" ? "/continue_generation" : "/resume", json::object(), control_deadline());
    {
      std::lock_guard l(mutex_);
      paused_ = false;
    }
    work_changed_.notify_all();
  }

  void load_weights(const mlpt_load_weights_args& a) override {
    if (a.version <= version_.load())
      throw Error(MLPT_INVALID_ARGUMENT, "engine http: weight version " + std::to_string(a.version) + " is not greater than the loaded " +
                                             std::to_string(version_.load()));
    if (a.num_tensors && !a.tensors) throw Error(MLPT_INVALID_ARGUMENT, "engine http: tensors is NULL");
    write_weights_file(settings_.weights_dir, a.tensors, a.num_tensors);
    std::lock_guard c(control_mutex_);
    json answer = control_.post("/update_weights_from_disk",
                                {{"model_path", settings_.weights_dir}, {"weight_version", std::to_string(a.version)}, {"abort_all_requests", false}},
                                {settings_.control_timeout_s, "control_timeout_s"});
    if (!answer.value("success", false))
      throw Error(MLPT_INTERNAL, "engine http: " + settings_.url + "/update_weights_from_disk refused version " + std::to_string(a.version) +
                                     ": " + answer.value("message", answer.dump()));
    version_ = a.version;
  }

 private:
  struct Running {
    std::string rid;
    size_t worker;
  };

  Deadline control_deadline() const { return {settings_.control_timeout_s, "control_timeout_s"}; }

  // The server may still be starting (a run that launched it a moment ago): poll /health.
  void wait_until_healthy() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(settings_.startup_timeout_s);
    for (;;) {
      try {
        control_.get("/health", {settings_.connect_timeout_s, "connect_timeout_s"});
        return;
      } catch (const Error& e) {
        if (std::chrono::steady_clock::now() >= until)
          throw Error(MLPT_UNAVAILABLE, std::string(e.what()) + " (still failing after startup_timeout_s = " +
                                            std::to_string(static_cast<int>(settings_.startup_timeout_s)) + " s)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // The served model's facts from GET /v1/models (vLLM: id, max_model_len; mlpt serve adds the
  // rest), overridden by the settings.
  void read_model() {
    json models = control_.get("/v1/models", {settings_.connect_timeout_s * 6, "connect_timeout_s (x6)"});
    const json* chosen = nullptr;
    if (models.contains("data") && models["data"].is_array())
      for (const auto& m : models["data"])
        if (settings_.model.empty() || m.value("id", "") == settings_.model) {
          chosen = &m;
          break;
        }
    if (!chosen)
      throw Error(MLPT_NOT_FOUND, "engine http: " + settings_.url + "/v1/models lists no model" +
                                      (settings_.model.empty() ? std::string() : " named \"" + settings_.model + "\"") + ": " + models.dump().substr(0, 300));
    model_ = chosen->value("id", "");
    const json facts = chosen->value("mlpt", json::object());
    auto reported = [&](const char* key) { return facts.value(key, json()).is_number_integer() ? facts[key].get<int64_t>() : int64_t(0); };
    vocab_size_ = settings_.vocab_size > 0 ? settings_.vocab_size : reported("vocab_size");
    max_sequence_length_ = settings_.max_sequence_length > 0 ? settings_.max_sequence_length : chosen->value("max_model_len", int64_t(0));
    shape_.num_moe_layers = settings_.num_moe_layers >= 0 ? settings_.num_moe_layers : reported("num_moe_layers");
    shape_.experts_per_token = settings_.experts_per_token >= 0 ? settings_.experts_per_token : reported("experts_per_token");
    if (facts.value("weight_version", json()).is_string()) version_ = std::stoull(facts["weight_version"].get<std::string>());
    if (vocab_size_ <= 0 || max_sequence_length_ <= 0)
      throw Error(MLPT_INVALID_ARGUMENT, "engine http: " + settings_.url + " does not report the model's vocab_size and max_model_len: set " +
                                             "vocab_size and max_sequence_length in the engine's settings");
  }

  // Asks the server to end requests cancelled after they were sent; it answers each waiting call
  // with the tokens so far. When the server cannot be told, that call's connection is dropped.
  void abort_sent() {
    for (;;) {
      Running abort;
      {
        std::unique_lock l(mutex_);
        abort_wanted_.wait(l, [&] { return stopping_ || !aborts_.empty(); });
        if (stopping_) return;
        abort = std::move(aborts_.front());
        aborts_.pop_front();
      }
      try {
        std::lock_guard c(control_mutex_);
        if (settings_.api == "sglang") control_.post("/abort_request", {{"rid", abort.rid}}, control_deadline());
        else control_.post("/abort_requests", {{"request_ids", {abort.rid}}}, control_deadline());
      } catch (const std::exception&) {
        connections_[abort.worker]->interrupt();
      }
    }
  }

  void work(size_t worker) {
    ServerConnection& connection = *connections_[worker];
    for (;;) {
      std::shared_ptr<GenerationRequest> r;
      std::string rid;
      {
        std::unique_lock l(mutex_);
        work_changed_.wait(l, [&] { return stopping_ || (!paused_ && !queue_.empty()); });
        if (stopping_) return;
        r = std::move(queue_.front());
        queue_.pop_front();
        rid = rid_prefix_ + std::to_string(++sent_) + "-" + std::to_string(r->id);  // unique even when a request id comes back
        running_[r->id] = {rid, worker};
      }
      mlpt_error_code failed = MLPT_OK;
      std::string message;
      mlpt_finish_reason reason = MLPT_FINISH_STOP;
      try {
        json answer = connection.post("/v1/completions", completion_body(*r, model_, rid), {settings_.request_timeout_s, "request_timeout_s"});
        reason = read_completion(answer, *r, shape_, version_.load());
      } catch (const Error& e) {
        failed = e.code(), message = std::string(e.what()) + " (request " + std::to_string(r->id) + ")";
      } catch (const std::exception& e) {
        failed = MLPT_INTERNAL, message = std::string("engine http: ") + e.what() + " (request " + std::to_string(r->id) + ")";
      }
      {
        std::lock_guard l(mutex_);
        running_.erase(r->id);
      }
      if (failed == MLPT_CANCELLED) {  // interrupted by cancel: ends as cancelled, nothing kept
        r->out_tokens.clear(), r->out_logprobs.clear(), r->out_routed_experts.clear();
        r->out_weight_version = version_.load();
        r->finish(MLPT_FINISH_CANCELLED);
      } else if (failed != MLPT_OK) {
        r->fail(failed, message);
      } else {
        r->finish(reason);
      }
    }
  }

  Settings settings_;
  std::filesystem::path owned_weights_dir_;  // removed at destruction
  std::string rid_prefix_, model_;
  int64_t vocab_size_ = 0, max_sequence_length_ = 0;
  ModelShape shape_;
  std::atomic<uint64_t> version_{0};

  std::mutex control_mutex_;  // one control call at a time on control_
  ServerConnection control_;
  std::vector<std::unique_ptr<ServerConnection>> connections_;  // one per worker
  std::vector<std::thread> workers_;  // one per connection, and the aborter

  std::mutex mutex_;
  std::condition_variable work_changed_;  // queue_, paused_, stopping_ (the workers)
  std::condition_variable abort_wanted_;  // aborts_, stopping_ (the aborter)
  std::deque<std::shared_ptr<GenerationRequest>> queue_;
  std::unordered_map<uint64_t, Running> running_;
  std::deque<Running> aborts_;  // sent requests to abort at the server
  uint64_t sent_ = 0;           // requests sent so far
  bool paused_ = false, stopping_ = false;
};

const mlpt_engine_capabilities kCapabilities = {MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE, /*returns_logprobs=*/1,
                                                /*returns_routed_experts=*/1, /*keeps_sessions=*/0,
                                                /*supports_cancel=*/1, /*deterministic_seed=*/1};

}  // namespace
}  // namespace mlpt::engine_http

MLPT_SDK_PLUGIN("mlpt_engine_http", "0.1.0",
                mlpt::sdk::engine_component<mlpt::engine_http::HttpEngine>(
                    "http", "an inference server (vLLM, SGLang, mlpt serve) over its OpenAI-compatible completions API, token ids in and out",
                    &mlpt::engine_http::kCapabilities))
