#include "engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "model/named_tensors.hpp"
#include "model/settings.hpp"
#include "model/vocabulary.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::ref {

using sdk::Error;

struct ReferenceEngine::Request {
  uint64_t id = 0, session_id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_new = 0;
  std::vector<int32_t> stop;
  bool record = false;
  size_t routed_from = 0;

  std::unique_ptr<Session> session;
  std::vector<int32_t> pending;  // tokens to feed at the next step
  std::vector<int32_t> out_tokens;
  std::vector<float> out_logprobs;
  std::vector<int16_t> out_routing;  // [routed_from, end) x layers x k, filled at finish
  // After the last sample, a recording request feeds that token once more so its routing is known.
  bool final_feed = false;
  mlpt_finish_reason final_reason{};

  std::atomic<bool> cancel_requested{false};
  bool done = false;
  mlpt_finish_reason reason{};
  std::string error;
  mlpt_error_code error_code = MLPT_OK;
  uint64_t version = 0;
};

ReferenceEngine::ReferenceEngine(std::string_view config_json) : sessions_(0) {
  Settings s(config_json, "engine qwen35_cpu");
  std::string dir = s.string("checkpoint");
  int64_t threads = s.integer_or("threads", 1, 1);
  max_step_tokens_ = s.integer_or("max_step_tokens", 2048, 1);
  int64_t budget = s.integer_or("session_memory_bytes", int64_t(1) << 30, 0);
  int64_t max_seq = s.integer_or("max_sequence_length", 0, 1);
  int64_t vocab_override = s.integer_or("sampling_vocab_size", 0, 1);
  std::string prefill = s.string_or("gdn_prefill", "chunked");
  if (prefill != "chunked" && prefill != "recurrent") s.fail("gdn_prefill", "expected \"chunked\" or \"recurrent\"");
  s.reject_unknown();
  prefill_mode_ = prefill == "chunked" ? GdnMode::chunked : GdnMode::recurrent;
  sessions_ = SessionStore(static_cast<size_t>(budget));
  threads_ = static_cast<int>(threads);

  auto w = std::make_shared<Weights<float>>(::mlpt::ref::load_weights<float>(dir));
  config_ = w->config;
  weights_ = std::move(w);
  valid_vocab_ = sampling_vocab_size(config_, dir, vocab_override);
  max_sequence_length_ = max_seq > 0 ? max_seq : config_.max_position_embeddings;
  scheduler_ = std::thread([this] { scheduler_loop(); });
}

ReferenceEngine::~ReferenceEngine() {
  {
    std::lock_guard lk(mutex_);
    stopping_ = true;
  }
  wake_scheduler_.notify_all();
  state_changed_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
}

void ReferenceEngine::model_info(mlpt_engine_model_info& info) {
  std::lock_guard lk(mutex_);
  info.vocab_size = config_.vocab_size;
  info.num_moe_layers = config_.num_moe_layers();
  info.experts_per_token = config_.experts_per_token;
  info.max_sequence_length = max_sequence_length_;
  info.weight_version = weight_version_;
}

void ReferenceEngine::generate(mlpt_generate_args& a) {
  // ---- check the request before it can touch any state ----
  if (!a.tokens || a.num_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "tokens: at least one token is required");
  if (a.max_new_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "max_new_tokens must be >= 1");
  if (!a.out_tokens) throw Error(MLPT_INVALID_ARGUMENT, "out_tokens is NULL");
  if (a.sampling.struct_size < MLPT_SAMPLING_PARAMS_STRUCT_SIZE)
    throw Error(MLPT_INVALID_ARGUMENT, "sampling.struct_size too small");
  if (!(a.sampling.temperature > 0)) throw Error(MLPT_INVALID_ARGUMENT, "sampling.temperature must be > 0");
  if (!(a.sampling.top_p > 0 && a.sampling.top_p <= 1)) throw Error(MLPT_INVALID_ARGUMENT, "sampling.top_p must be in (0, 1]");
  if (a.sampling.top_k < 0) throw Error(MLPT_INVALID_ARGUMENT, "sampling.top_k must be >= 0");
  if (a.num_stop_tokens && !a.stop_tokens) throw Error(MLPT_INVALID_ARGUMENT, "stop_tokens is NULL");
  if (a.record_routed_experts && !a.out_routed_experts)
    throw Error(MLPT_INVALID_ARGUMENT, "record_routed_experts set but out_routed_experts is NULL");
  if (a.record_routed_experts && a.routed_experts_from > a.num_tokens)
    throw Error(MLPT_INVALID_ARGUMENT, "routed_experts_from is beyond the tokens");
  if (static_cast<int64_t>(a.num_tokens) >= max_sequence_length_)
    throw Error(MLPT_INVALID_ARGUMENT, std::to_string(a.num_tokens) + " tokens leave no room under max_sequence_length " +
                                           std::to_string(max_sequence_length_));
  for (size_t i = 0; i < a.num_tokens; ++i)
    if (a.tokens[i] < 0 || a.tokens[i] >= config_.vocab_size)
      throw Error(MLPT_INVALID_ARGUMENT, "token " + std::to_string(a.tokens[i]) + " at position " + std::to_string(i) +
                                             " is outside the vocabulary");

  Request r;
  r.id = a.request_id;
  r.session_id = a.session_id;
  r.prompt.assign(a.tokens, a.tokens + a.num_tokens);
  r.sampling = SamplingParams{a.sampling.temperature, a.sampling.top_p, a.sampling.top_k, a.sampling.seed};
  r.max_new = a.max_new_tokens;
  r.stop.assign(a.stop_tokens, a.stop_tokens + a.num_stop_tokens);
  r.record = a.record_routed_experts != 0;
  r.routed_from = a.routed_experts_from;

  std::unique_lock lk(mutex_);
  while (paused_ && !stopping_) {  // a new call waits for resume
    if (sdk::cancelled()) {
      a.out_num_tokens = 0;
      a.out_finish_reason = MLPT_FINISH_CANCELLED;
      a.out_weight_version = weight_version_;
      return;
    }
    state_changed_.wait_for(lk, std::chrono::milliseconds(50));
  }
  if (stopping_) throw Error(MLPT_UNAVAILABLE, "engine is shutting down");
  if (in_flight_ids_.count(r.id))
    throw Error(MLPT_FAILED_PRECONDITION, "request_id " + std::to_string(r.id) + " is already in flight");
  if (r.session_id) {
    if (busy_sessions_.count(r.session_id))
      throw Error(MLPT_FAILED_PRECONDITION, "session " + std::to_string(r.session_id) + " is already generating");
    r.session = sessions_.take(r.session_id);
    const Session* s = r.session.get();
    const size_t L = static_cast<size_t>(config_.num_moe_layers() * config_.experts_per_token);
    bool extends = s && s->tokens.size() < r.prompt.size() &&
                   std::equal(s->tokens.begin(), s->tokens.end(), r.prompt.begin());
    // Routing of cached positions is needed when recording from before the cached end.
    bool routing_ok = !r.record || r.routed_from >= (s ? s->tokens.size() : 0) ||
                      (s && s->routing.size() == s->tokens.size() * L);
    if (!extends || !routing_ok) r.session.reset();  // re-prefill from scratch: always correct
    busy_sessions_.insert(r.session_id);
  }
  if (!r.session) r.session = std::make_unique<Session>(config_);
  r.pending.assign(r.prompt.begin() + static_cast<int64_t>(r.session->tokens.size()), r.prompt.end());
  in_flight_ids_.insert(r.id);
  ++running_;
  cancel_index_[r.id] = &r;
  incoming_.push_back(&r);
  wake_scheduler_.notify_one();
  state_changed_.wait(lk, [&] { return r.done; });
  cancel_index_.erase(r.id);
  in_flight_ids_.erase(r.id);
  if (r.session_id) busy_sessions_.erase(r.session_id);
  --running_;
  state_changed_.notify_all();
  lk.unlock();

  if (r.error_code != MLPT_OK) throw Error(r.error_code, r.error);
  size_t n = std::min(r.out_tokens.size(), static_cast<size_t>(a.max_new_tokens));
  std::copy(r.out_tokens.begin(), r.out_tokens.begin() + static_cast<int64_t>(n), a.out_tokens);
  if (a.out_logprobs) std::copy(r.out_logprobs.begin(), r.out_logprobs.begin() + static_cast<int64_t>(n), a.out_logprobs);
  if (r.record) std::copy(r.out_routing.begin(), r.out_routing.end(), a.out_routed_experts);
  a.out_num_tokens = n;
  a.out_finish_reason = r.reason;
  a.out_weight_version = r.version;
}

void ReferenceEngine::cancel(uint64_t request_id) {
  std::lock_guard lk(mutex_);
  auto it = cancel_index_.find(request_id);
  if (it != cancel_index_.end()) it->second->cancel_requested = true;
  wake_scheduler_.notify_all();
}

void ReferenceEngine::session_release(uint64_t session_id) {
  std::lock_guard lk(mutex_);
  if (busy_sessions_.count(session_id))
    throw Error(MLPT_FAILED_PRECONDITION, "session " + std::to_string(session_id) + " is generating");
  sessions_.erase(session_id);
}

void ReferenceEngine::pause() {
  std::unique_lock lk(mutex_);
  if (paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine is already paused (pause does not nest)");
  paused_ = true;
  state_changed_.wait(lk, [&] { return running_ == 0; });
}

void ReferenceEngine::resume() {
  std::lock_guard lk(mutex_);
  if (!paused_) throw Error(MLPT_FAILED_PRECONDITION, "engine is not paused");
  paused_ = false;
  state_changed_.notify_all();
}

void ReferenceEngine::load_weights(const mlpt_load_weights_args& a) {
  std::lock_guard lk(mutex_);
  if (running_ > 0) throw Error(MLPT_FAILED_PRECONDITION, "load_weights while generating: pause the engine first");
  if (a.version <= weight_version_)
    throw Error(MLPT_INVALID_ARGUMENT, "version " + std::to_string(a.version) + " is not greater than the loaded " +
                                           std::to_string(weight_version_));
  if (a.num_tensors && !a.tensors) throw Error(MLPT_INVALID_ARGUMENT, "tensors is NULL");
  auto w = std::make_shared<Weights<float>>(import_named_tensors(config_, a.tensors, a.num_tensors));
  weights_ = std::move(w);
  weight_version_ = a.version;
  sessions_.clear();  // caches computed with the old weights are stale
}

// ---- the scheduler ----

void ReferenceEngine::finish(Request* r, mlpt_finish_reason reason) {
  // Called with mutex_ held.
  r->reason = reason;
  r->version = weight_version_;
  if (r->record) {
    const size_t per = static_cast<size_t>(config_.num_moe_layers() * config_.experts_per_token);
    const size_t end = r->prompt.size() + r->out_tokens.size();
    r->out_routing.assign((end - r->routed_from) * per, int16_t(-1));  // -1: never fed (cancelled)
    size_t have = std::min(end, r->session->routing.size() / per);
    for (size_t p = r->routed_from; p < have; ++p)
      std::copy(r->session->routing.begin() + p * per, r->session->routing.begin() + (p + 1) * per,
                r->out_routing.begin() + (p - r->routed_from) * per);
  }
  if (r->session_id && reason != MLPT_FINISH_CANCELLED) sessions_.put(r->session_id, std::move(r->session));
  r->session.reset();
  r->done = true;
  state_changed_.notify_all();
}

void ReferenceEngine::fail(Request* r, const std::string& message, mlpt_error_code code) {
  r->error = message;
  r->error_code = code;
  r->session.reset();
  r->done = true;
  state_changed_.notify_all();
}

void ReferenceEngine::scheduler_loop() {
  cpu::set_cpu_threads(threads_);  // OpenMP thread counts are per calling thread
  std::vector<Request*> active;
  for (;;) {
    {
      std::unique_lock lk(mutex_);
      wake_scheduler_.wait_for(lk, std::chrono::milliseconds(active.empty() ? 200 : 0),
                               [&] { return stopping_ || !incoming_.empty() || !active.empty(); });
      if (stopping_) {
        for (Request* r : active) fail(r, "engine destroyed during generation", MLPT_CANCELLED);
        for (Request* r : incoming_) fail(r, "engine destroyed during generation", MLPT_CANCELLED);
        incoming_.clear();
        return;
      }
      while (!incoming_.empty()) {
        active.push_back(incoming_.front());
        incoming_.pop_front();
      }
      bool host_cancel = sdk::cancelled();
      for (Request*& r : active)
        if (r->cancel_requested || host_cancel) {
          finish(r, MLPT_FINISH_CANCELLED);
          r = nullptr;
        }
      active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
    }
    if (active.empty()) continue;
    run_step(active);
  }
}

void ReferenceEngine::run_step(std::vector<Request*>& active) {
  std::shared_ptr<const Weights<float>> w;
  {
    std::lock_guard lk(mutex_);
    w = weights_;
  }
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;

  // Decoding requests first (one token each), then prefill chunks within the step budget.
  std::vector<Request*> seg;
  std::vector<int64_t> take;
  int64_t budget = max_step_tokens_;
  for (Request* r : active)
    if (r->pending.size() == 1) {
      seg.push_back(r);
      take.push_back(1);
      budget -= 1;
    }
  for (Request* r : active) {
    if (r->pending.size() <= 1) continue;
    int64_t n = std::min<int64_t>(static_cast<int64_t>(r->pending.size()), budget);
    if (n <= 0 && seg.empty()) n = std::min<int64_t>(static_cast<int64_t>(r->pending.size()), max_step_tokens_);
    if (n <= 0) continue;
    seg.push_back(r);
    take.push_back(n);
    budget -= n;
  }

  ForwardBatch<float> fb;
  std::vector<int32_t> tokens;
  bool any_record = false;
  for (size_t i = 0; i < seg.size(); ++i) {
    tokens.insert(tokens.end(), seg[i]->pending.begin(), seg[i]->pending.begin() + take[i]);
    fb.offsets.push_back(fb.offsets.back() + take[i]);
    fb.caches.push_back(&seg[i]->session->cache);
    any_record |= seg[i]->record;
  }
  fb.tokens = tokens.data();
  fb.gdn_mode = prefill_mode_;
  std::vector<int16_t> routing(any_record ? tokens.size() * static_cast<size_t>(per) : 0);
  if (any_record) fb.routed_experts = routing.data();

  std::vector<float> hidden;
  try {
    hidden = forward_hidden(*w, fb);
  } catch (const std::exception& e) {
    // A request object dies as soon as it is marked done: drop it from `active` first.
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](Request* r) { return std::find(seg.begin(), seg.end(), r) != seg.end(); }),
                 active.end());
    std::lock_guard lk(mutex_);
    for (Request* r : seg) fail(r, std::string("forward failed: ") + e.what(), MLPT_INTERNAL);
    return;
  }

  std::vector<size_t> to_sample;
  std::vector<std::pair<Request*, mlpt_finish_reason>> finished;
  for (size_t i = 0; i < seg.size(); ++i) {
    Request* r = seg[i];
    Session& s = *r->session;
    s.tokens.insert(s.tokens.end(), r->pending.begin(), r->pending.begin() + take[i]);
    if (r->record)
      s.routing.insert(s.routing.end(), routing.begin() + fb.offsets[i] * per, routing.begin() + fb.offsets[i + 1] * per);
    else
      s.routing.clear();  // a gap would misalign later positions
    r->pending.erase(r->pending.begin(), r->pending.begin() + take[i]);
    if (!r->pending.empty()) continue;
    if (r->final_feed)
      finished.push_back({r, r->final_reason});
    else
      to_sample.push_back(i);
  }

  if (!to_sample.empty()) {
    std::vector<float> rows(to_sample.size() * H), logits(to_sample.size() * V);
    for (size_t j = 0; j < to_sample.size(); ++j) {
      int64_t row = fb.offsets[to_sample[j] + 1] - 1;
      std::copy(hidden.begin() + row * H, hidden.begin() + (row + 1) * H, rows.begin() + j * H);
    }
    lm_head_forward(*w, static_cast<int64_t>(to_sample.size()), rows.data(), logits.data());
    for (size_t j = 0; j < to_sample.size(); ++j) {
      Request* r = seg[to_sample[j]];
      uint64_t position = r->session->tokens.size();  // absolute position of the new token
      SampledToken t = sample_token(logits.data() + j * V, valid_vocab_, r->sampling, position);
      r->out_tokens.push_back(t.token);
      r->out_logprobs.push_back(t.logprob);
      bool stop = std::find(r->stop.begin(), r->stop.end(), t.token) != r->stop.end();
      bool length = static_cast<int32_t>(r->out_tokens.size()) >= r->max_new ||
                    static_cast<int64_t>(position + 1) >= max_sequence_length_;
      if (stop || length) {
        mlpt_finish_reason reason = stop ? MLPT_FINISH_STOP : MLPT_FINISH_LENGTH;
        if (r->record) {
          r->final_feed = true;
          r->final_reason = reason;
          r->pending = {t.token};
        } else {
          finished.push_back({r, reason});
        }
      } else {
        r->pending = {t.token};
      }
    }
  }
  if (!finished.empty()) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](Request* r) {
                                  for (auto& f : finished)
                                    if (f.first == r) return true;
                                  return false;
                                }),
                 active.end());
    std::lock_guard lk(mutex_);
    for (auto& [r, reason] : finished) finish(r, reason);  // r may be gone once this returns
  }
}

}  // namespace mlpt::ref
