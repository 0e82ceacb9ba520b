// The reference inference engine (mlpt/engine.h): one scheduler for the components "qwen35_cpu"
// (engine/cpu_backend.hpp), "qwen35_cuda" and "qwen35_bf16" (engine/device_backend.hpp); the
// model step and the per-sequence state are the backend's (engine/backend.hpp).
//
// Continuous batching: submit() from any thread queues a request and returns; one scheduler thread
// runs steps, each one backend step over a packed batch of segments: one token for every decoding
// request plus prefill chunks of new requests (a step holds at most `max_step_tokens` tokens; long
// prompts prefill over several steps), and completes finished requests (their on_ready callbacks
// run on the scheduler thread, with no lock held). Every sequence keeps its own state, so requests
// join and leave between any two steps. Hundreds of requests in flight cost no thread each.
//
// Logprobs: out_logprobs[i] is the log-probability of out_tokens[i] under the distribution it was
// sampled from, softmax(logits / temperature) over the real vocabulary restricted to the top-k/top-p
// set (model/sampling.hpp). At temperature 1, top_p 1, top_k 0 (the benchmark's training rollouts)
// this equals the trainer's compute_logprobs of the same sequence up to the backend's rounding.
//
// Determinism: the draw for the token at absolute position p of a request with seed s depends on
// (s, p) only, so batching, session reuse and thread timing do not change it. Logits in a batch
// differ from a lone request's by rounding only (BLAS blocking), so a token can differ only where
// two candidates are within that rounding of the draw.
//
// Shared prompts (engine/prefix_cache.hpp): a fresh request (no session to continue) first looks
// for a cached prefix of its tokens; without one it prefills up to its last prompt token, keeps a
// copy of that state in the prefix cache, then feeds the last token. A fresh request whose prompt
// another running request is about to cache waits for it instead of computing it again (the 16
// members of a group arrive together). The cache is cleared at every weight load, and entries are
// found only at the weight version that made them. A request's tokens are computed the same way
// (up to the last prompt token, then the rest) whether its prefix was cached or not, so a cache
// hit gives bit for bit the logprobs of a cold engine.
//
// Settings (JSON), both backends: checkpoint (required), max_step_tokens (2048),
// session_memory_bytes (1 GiB: budget for idle sessions, LRU eviction; a CUDA session's device
// memory counts), prefix_cache_bytes (256 MiB: budget for cached prompt prefixes; 0 turns the
// cache off), max_sequence_length (max_position_embeddings of the config), sampling_vocab_size
// (ids that may be sampled; default from the checkpoint's tokenizer.json, else vocab_size),
// gdn_prefill ("chunked" | "recurrent"); and each backend's own.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "engine/backend.hpp"
#include "engine/prefix_cache.hpp"
#include "engine/sessions.hpp"
#include "mlpt/sdk/engine.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

// Makes the backend from the settings (it reads its own keys, then calls reject_unknown() before
// touching any device), the checkpoint directory and whether prefill uses the chunked GDN form.
using BackendFactory =
    std::function<std::unique_ptr<EngineBackend>(sdk::Settings& settings, const std::string& checkpoint,
                                                 bool chunked_prefill)>;

class ReferenceEngine : public sdk::Engine {
 public:
  // `component` names the settings in errors ("engine qwen35_cpu").
  ReferenceEngine(std::string_view config_json, const std::string& component, const BackendFactory& make_backend);
  ~ReferenceEngine() override;

  void model_info(mlpt_engine_model_info& info) override;
  void submit(std::shared_ptr<sdk::GenerationRequest> request) override;
  void cancel(uint64_t request_id) override;
  void session_release(uint64_t session_id) override;
  void pause() override;
  void resume() override;
  void load_weights(const mlpt_load_weights_args& args) override;
  sdk::TensorLayout weight_layout() override;
  void load_refused(const sdk::Error& why) override;

 private:
  void require_rank_zero(const char* what) const;
  struct Request;
  // A request that left the engine, to be completed (its callback fired) once the lock is released.
  struct Completion {
    std::shared_ptr<sdk::GenerationRequest> request;
    mlpt_finish_reason reason;
    mlpt_error_code code;
    std::string message;
  };
  void check(const sdk::GenerationRequest& r) const;
  void admit_locked(Request* r);
  void scheduler_loop();
  void run_step(std::vector<Request*>& active, std::vector<Completion>& done);
  void start_prefix_locked(Request* r, const std::vector<Request*>& active);
  bool uses_prefix_cache(const Request& r) const;
  Completion finish_locked(Request* r, mlpt_finish_reason reason);
  Completion fail_locked(Request* r, const std::string& message, mlpt_error_code code);
  Completion release_locked(Request* r, Completion c);
  static void complete(std::vector<Completion>& done);

  std::unique_ptr<EngineBackend> backend_;  // first: every sequence state below dies before it
  ModelConfig config_;
  uint64_t weight_version_ = 0;
  int64_t valid_vocab_ = 0, max_step_tokens_ = 2048, max_sequence_length_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_scheduler_, state_changed_;
  std::deque<Request*> held_;                  // submitted while paused: admitted on resume
  std::deque<Request*> incoming_;              // admitted, not yet seen by the scheduler
  std::map<uint64_t, std::unique_ptr<Request>> in_flight_;  // owns every submitted, unfinished request
  std::set<uint64_t> busy_sessions_;
  SessionStore sessions_;
  PrefixCache prefixes_;
  int64_t prefill_tokens_ = 0, prefix_tokens_saved_ = 0;  // since the last weight load
  int running_ = 0;  // requests admitted and not yet finished (pause waits for 0)
  bool paused_ = false, stopping_ = false;
  std::thread scheduler_;
};

}  // namespace mlpt::ref
