#include "engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>

#include "mlpt/sdk/settings.hpp"
#include "model/vocabulary.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::ref {

using sdk::Error;
using sdk::Settings;

// The engine's state of one submitted request; the caller's GenerationRequest holds the inputs
// and receives the result.
struct ReferenceEngine::Request {
  std::shared_ptr<sdk::GenerationRequest> in;
  SamplingParams sampling;
  std::unique_ptr<Session> session;
  std::vector<int32_t> pending;  // tokens to feed at the next step
  // After the last sample, a recording request feeds that token once more so its routing is known.
  bool final_feed = false;
  mlpt_finish_reason final_reason{};
  // Prefix cache: publish the session once it holds this many tokens (0: never); or wait until the
  // request that will publish this request's prefix has done so.
  size_t publish_at = 0;
  bool waiting = false;
  std::atomic<bool> cancel_requested{false};
};

ReferenceEngine::ReferenceEngine(std::string_view config_json, const std::string& component,
                                 const BackendFactory& make_backend)
    : sessions_(0), prefixes_(0) {
  Settings s(config_json, component);
  std::string dir = s.string("checkpoint");
  max_step_tokens_ = s.integer_or("max_step_tokens", 2048, 1);
  int64_t budget = s.integer_or("session_memory_bytes", int64_t(1) << 30, 0);
  int64_t prefix_budget = s.integer_or("prefix_cache_bytes", int64_t(256) << 20, 0);
  int64_t max_seq = s.integer_or("max_sequence_length", 0, 1);
  int64_t vocab_override = s.integer_or("sampling_vocab_size", 0, 1);
  std::string prefill = s.string_or("gdn_prefill", "chunked");
  if (prefill != "chunked" && prefill != "recurrent") s.fail("gdn_prefill", "expected \"chunked\" or \"recurrent\"");
  sessions_ = SessionStore(static_cast<size_t>(budget));
  prefixes_ = PrefixCache(static_cast<size_t>(prefix_budget));
  backend_ = make_backend(s, dir, prefill == "chunked");  // reads its own settings, rejects unknown ones
  config_ = backend_->config();
  mlpt_error_code code = MLPT_OK;
  std::string refusal;  // an engine group's create fails on every rank or on none (engine.h)
  try {
    valid_vocab_ = sampling_vocab_size(config_, dir, vocab_override);
  } catch (const Error& e) {
    code = e.code(), refusal = e.what();
  } catch (const std::exception& e) {
    code = MLPT_INTERNAL, refusal = e.what();
  }
  backend_->created(code, refusal);
  max_sequence_length_ = max_seq > 0 ? max_seq : config_.max_position_embeddings;
  if (backend_->group_rank() > 0)
    scheduler_ = std::thread([this] { backend_->serve(); });  // rank 0 schedules, this rank computes with it
  else
    scheduler_ = std::thread([this] { scheduler_loop(); });
}

void ReferenceEngine::require_rank_zero(const char* what) const {
  if (const int rank = backend_->group_rank(); rank > 0)
    throw Error(MLPT_FAILED_PRECONDITION, std::string(what) + " on engine group rank " + std::to_string(rank) +
                                              ": requests go to rank 0 of the group (engine.h, Engine groups)");
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

void ReferenceEngine::check(const sdk::GenerationRequest& r) const {
  const auto& p = r.sampling;
  if (r.max_new_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "max_new_tokens must be >= 1");
  if (!(p.temperature > 0)) throw Error(MLPT_INVALID_ARGUMENT, "sampling.temperature must be > 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) throw Error(MLPT_INVALID_ARGUMENT, "sampling.top_p must be in (0, 1]");
  if (p.top_k < 0) throw Error(MLPT_INVALID_ARGUMENT, "sampling.top_k must be >= 0");
  if (r.record_routed_experts && r.routed_experts_from > r.tokens.size())
    throw Error(MLPT_INVALID_ARGUMENT, "routed_experts_from is beyond the tokens");
  if (static_cast<int64_t>(r.tokens.size()) >= max_sequence_length_)
    throw Error(MLPT_INVALID_ARGUMENT, std::to_string(r.tokens.size()) + " tokens leave no room under max_sequence_length " +
                                           std::to_string(max_sequence_length_));
  for (size_t i = 0; i < r.tokens.size(); ++i)
    if (r.tokens[i] < 0 || r.tokens[i] >= config_.vocab_size)
      throw Error(MLPT_INVALID_ARGUMENT, "token " + std::to_string(r.tokens[i]) + " at position " + std::to_string(i) +
                                             " is outside the vocabulary");
}

void ReferenceEngine::submit(std::shared_ptr<sdk::GenerationRequest> in) {
  require_rank_zero("submit");
  check(*in);  // before the request can touch any state
  auto r = std::make_unique<Request>();
  r->sampling = SamplingParams{in->sampling.temperature, in->sampling.top_p, in->sampling.top_k, in->sampling.seed};
  r->in = std::move(in);
  const uint64_t id = r->in->id, session = r->in->session_id;
  std::lock_guard lk(mutex_);
  if (stopping_) throw Error(MLPT_UNAVAILABLE, "engine is shutting down");
  if (in_flight_.count(id)) throw Error(MLPT_FAILED_PRECONDITION, "request_id " + std::to_string(id) + " is already in flight");
  if (session && !busy_sessions_.insert(session).second)
    throw Error(MLPT_FAILED_PRECONDITION, "session " + std::to_string(session) + " is already generating");
  Request* raw = r.get();
  in_flight_[id] = std::move(r);
  if (paused_)
    held_.push_back(raw);  // starts after resume
  else
    admit_locked(raw);
}

// Takes the request's session (or a fresh cache) and hands it to the scheduler. Sessions are taken
// here, not at submit, so a request held over a weight update never sees a stale cache.
void ReferenceEngine::admit_locked(Request* r) {
  const auto& in = *r->in;
  if (in.session_id) {
    r->session = sessions_.take(in.session_id);
    const Session* s = r->session.get();
    const size_t L = static_cast<size_t>(config_.num_moe_layers() * config_.experts_per_token);
    bool extends = s && s->tokens.size() < in.tokens.size() &&
                   std::equal(s->tokens.begin(), s->tokens.end(), in.tokens.begin());
    // Routing of cached positions is needed when recording from before the cached end.
    bool routing_ok = !in.record_routed_experts || in.routed_experts_from >= (s ? s->tokens.size() : 0) ||
                      (s && s->routing.size() == s->tokens.size() * L);
    if (!extends || !routing_ok) r->session.reset();  // re-prefill from scratch: always correct
  }
  if (!r->session) r->session = std::make_unique<Session>(backend_->new_state());
  r->pending.assign(in.tokens.begin() + static_cast<int64_t>(r->session->tokens.size()), in.tokens.end());
  ++running_;
  incoming_.push_back(r);
  wake_scheduler_.notify_one();
}

void ReferenceEngine::complete(std::vector<Completion>& done) {
  for (auto& c : done)
    if (c.code == MLPT_OK)
      c.request->finish(c.reason);
    else
      c.request->fail(c.code, c.message);
  done.clear();
}

void ReferenceEngine::cancel(uint64_t request_id) {
  require_rank_zero("cancel");
  std::vector<Completion> done;
  {
    std::lock_guard lk(mutex_);
    auto it = in_flight_.find(request_id);
    if (it == in_flight_.end()) return;
    Request* r = it->second.get();
    r->cancel_requested = true;
    auto held = std::find(held_.begin(), held_.end(), r);
    if (held != held_.end()) {  // never started: finishes now, with no tokens
      done.push_back(finish_locked(r, MLPT_FINISH_CANCELLED));
      held_.erase(held);
    }
  }
  wake_scheduler_.notify_all();
  complete(done);
}

void ReferenceEngine::session_release(uint64_t session_id) {
  require_rank_zero("session_release");
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
  for (Request* r : held_) admit_locked(r);
  held_.clear();
  state_changed_.notify_all();
}

sdk::TensorLayout ReferenceEngine::weight_layout() { return backend_->weight_layout(); }

void ReferenceEngine::load_refused(const Error& why) {
  if (backend_->group_size() == 1) return;
  std::lock_guard lk(mutex_);
  backend_->load_in_group(nullptr, why.code(), std::string("its receive failed: ") + why.what());
}

void ReferenceEngine::load_weights(const mlpt_load_weights_args& a) {
  const auto started = std::chrono::steady_clock::now();
  std::unique_lock lk(mutex_);
  // The reason to refuse; in a group it is the group's to hear (engine.h: all ranks load or none).
  mlpt_error_code code = MLPT_INVALID_ARGUMENT;
  std::string refusal;
  if (running_ > 0)
    code = MLPT_FAILED_PRECONDITION, refusal = "load_weights while generating: pause the engine first";
  else if (a.version <= weight_version_)
    refusal = "version " + std::to_string(a.version) + " is not greater than the loaded " + std::to_string(weight_version_);
  else if (a.num_tensors && !a.tensors)
    refusal = "tensors is NULL";
  if (backend_->group_size() > 1) {
    mlpt_load_weights_args given{};  // every field present (an older host's args end early)
    given.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
    given.engine = a.engine, given.version = a.version, given.tensors = a.tensors, given.num_tensors = a.num_tensors;
    if (sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_load_weights_args, shards))) given.shards = a.shards;
    backend_->load_in_group(&given, code, refusal);  // waits for the other ranks; mutex_ keeps this rank's state still
  } else {
    if (!refusal.empty()) throw Error(code, refusal);
    mlpt_device_ready ready{};  // absent or NULL: ready at the call
    if (sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_load_weights_args, ready)) && a.ready) ready = *a.ready;
    backend_->load_weights(a.tensors, a.num_tensors, ready);
  }
  weight_version_ = a.version;
  const double sessions = static_cast<double>(sessions_.size());
  sessions_.clear();  // caches computed with the old weights are stale
  prefixes_.clear();
  const double prefill = static_cast<double>(prefill_tokens_), saved = static_cast<double>(prefix_tokens_saved_);
  prefill_tokens_ = prefix_tokens_saved_ = 0;
  lk.unlock();
  // For the run's metrics and report (host services `metric`).
  sdk::metric("engine/load_weights_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  sdk::metric("engine/sessions_dropped_at_load", sessions);
  // Under the weights just replaced: prompt tokens prefilled, and those a cached prefix saved.
  sdk::metric("engine/prefill_tokens", prefill);
  sdk::metric("engine/prefix_tokens_saved", saved);
}

// ---- the scheduler ----

// Both remove the request from the engine (with mutex_ held) and return what completes it.
ReferenceEngine::Completion ReferenceEngine::finish_locked(Request* r, mlpt_finish_reason reason) {
  auto& in = *r->in;
  in.out_weight_version = weight_version_;
  if (in.record_routed_experts) {
    // The session holds [position][layer][k]; the result is per layer, [position][k].
    const size_t layers = static_cast<size_t>(config_.num_moe_layers()), k = static_cast<size_t>(config_.experts_per_token);
    const size_t end = in.tokens.size() + in.out_tokens.size(), from = in.routed_experts_from;
    static const std::vector<int16_t> none;
    const std::vector<int16_t>& routing = r->session ? r->session->routing : none;
    const size_t have = std::min(end, routing.size() / (layers * k));
    in.out_routed_experts.assign(layers, std::vector<int16_t>((end - from) * k, int16_t(-1)));  // -1: never fed
    for (size_t l = 0; l < layers; ++l)
      for (size_t p = from; p < have; ++p)
        std::copy_n(routing.begin() + static_cast<int64_t>((p * layers + l) * k), k,
                    in.out_routed_experts[l].begin() + static_cast<int64_t>((p - from) * k));
  }
  if (in.session_id && reason != MLPT_FINISH_CANCELLED && r->session) sessions_.put(in.session_id, std::move(r->session));
  return release_locked(r, Completion{r->in, reason, MLPT_OK, {}});
}

ReferenceEngine::Completion ReferenceEngine::fail_locked(Request* r, const std::string& message, mlpt_error_code code) {
  return release_locked(r, Completion{r->in, MLPT_FINISH_CANCELLED, code, message});
}

ReferenceEngine::Completion ReferenceEngine::release_locked(Request* r, Completion c) {
  const bool admitted = std::find(held_.begin(), held_.end(), r) == held_.end();
  if (c.request->session_id) busy_sessions_.erase(c.request->session_id);
  if (admitted) --running_;
  in_flight_.erase(c.request->id);  // r is gone
  state_changed_.notify_all();
  return c;
}

void ReferenceEngine::scheduler_loop() {
  std::vector<Request*> active;
  std::vector<Completion> done;
  for (;;) {
    {
      std::unique_lock lk(mutex_);
      wake_scheduler_.wait_for(lk, std::chrono::milliseconds(active.empty() ? 200 : 0),
                               [&] { return stopping_ || !incoming_.empty() || !active.empty(); });
      if (stopping_) {
        // Destroy requires every request released; these only exist if the host broke that rule.
        for (Request* r : active) done.push_back(fail_locked(r, "engine destroyed during generation", MLPT_CANCELLED));
        for (Request* r : incoming_) done.push_back(fail_locked(r, "engine destroyed during generation", MLPT_CANCELLED));
        for (Request* r : held_) done.push_back(finish_locked(r, MLPT_FINISH_CANCELLED));
        incoming_.clear();
        held_.clear();
        lk.unlock();
        complete(done);
        return;
      }
      while (!incoming_.empty()) {
        active.push_back(incoming_.front());
        incoming_.pop_front();
        start_prefix_locked(active.back(), active);
      }
      for (Request* r : active)  // their prefix may be cached now, or its publisher gone
        if (r->waiting) start_prefix_locked(r, active);
      const bool host_cancel = sdk::cancelled();
      for (Request*& r : active)
        if (r->cancel_requested || host_cancel) {
          done.push_back(finish_locked(r, MLPT_FINISH_CANCELLED));
          r = nullptr;
        }
      active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());
      if (host_cancel) {  // requests held by a pause end too
        for (auto it = held_.begin(); it != held_.end(); it = held_.erase(it)) done.push_back(finish_locked(*it, MLPT_FINISH_CANCELLED));
      }
    }
    complete(done);
    if (active.empty()) continue;
    run_step(active, done);
    complete(done);
  }
}

bool ReferenceEngine::uses_prefix_cache(const Request& r) const {
  return prefixes_.enabled() && r.session->tokens.empty() && r.in->tokens.size() >= 2;
}

// A fresh request takes the longest cached prefix of its tokens, or waits for a running request
// that is about to cache the same prompt, or else will cache its own prompt (all but the last token).
void ReferenceEngine::start_prefix_locked(Request* r, const std::vector<Request*>& active) {
  r->waiting = false;
  if (!uses_prefix_cache(*r)) return;
  const auto& in = *r->in;
  const size_t key = in.tokens.size() - 1, per = static_cast<size_t>(config_.num_moe_layers() * config_.experts_per_token);
  const bool need_routing = in.record_routed_experts;  // positions index the session's routing from 0
  if (auto hit = prefixes_.lookup(in.tokens, weight_version_, need_routing ? per : 0)) {
    prefix_tokens_saved_ += static_cast<int64_t>(hit->tokens.size());
    r->session = std::move(hit);
    r->pending.assign(in.tokens.begin() + static_cast<int64_t>(r->session->tokens.size()), in.tokens.end());
    r->publish_at = r->session->tokens.size() < key ? key : 0;
    return;
  }
  for (const Request* o : active)
    if (o != r && !o->waiting && o->publish_at == key && o->session->tokens.size() < key &&
        (!need_routing || o->in->record_routed_experts) &&
        std::equal(in.tokens.begin(), in.tokens.begin() + static_cast<int64_t>(key), o->in->tokens.begin())) {
      r->waiting = true;
      return;
    }
  r->publish_at = key;
}

// One backend step over the active requests; the requests that finish move from `active` to `done`.
void ReferenceEngine::run_step(std::vector<Request*>& active, std::vector<Completion>& done) {
  uint64_t version = 0;
  {
    std::lock_guard lk(mutex_);
    version = weight_version_;
  }
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;

  // Decoding requests first (one token each), then prefill chunks within the step budget.
  std::vector<Request*> seg;
  std::vector<int64_t> take;
  int64_t budget = max_step_tokens_;
  for (Request* r : active)
    if (!r->waiting && r->pending.size() == 1) {
      seg.push_back(r);
      take.push_back(1);
      budget -= 1;
    }
  for (Request* r : active) {
    if (r->waiting || r->pending.size() <= 1) continue;
    int64_t n = std::min<int64_t>(static_cast<int64_t>(r->pending.size()), budget);
    if (n <= 0 && seg.empty()) n = std::min<int64_t>(static_cast<int64_t>(r->pending.size()), max_step_tokens_);
    if (n <= 0) continue;
    if (const size_t have = r->session->tokens.size(); r->publish_at > have)  // stop where the prefix is cached
      n = std::min<int64_t>(n, static_cast<int64_t>(r->publish_at - have));
    seg.push_back(r);
    take.push_back(n);
    budget -= n;
  }

  // A segment that consumes all its pending tokens samples the next one (unless that was the
  // recording request's final feed); the draw's counter is the new token's absolute position.
  std::vector<StepSegment> segments(seg.size());
  std::vector<int64_t> offsets{0};
  bool any_record = false;
  for (size_t i = 0; i < seg.size(); ++i) {
    Request* r = seg[i];
    StepSegment& g = segments[i];
    g.state = r->session->state.get();
    g.tokens = std::span<const int32_t>(r->pending.data(), static_cast<size_t>(take[i]));
    if (take[i] == static_cast<int64_t>(r->pending.size()) && !r->final_feed) {
      g.sample = &r->sampling;
      g.counter = r->session->tokens.size() + static_cast<size_t>(take[i]);
    }
    offsets.push_back(offsets.back() + take[i]);
    any_record |= r->in->record_routed_experts;
  }

  StepOutput out;
  try {
    backend_->step(segments, valid_vocab_, any_record, out);
  } catch (const std::exception& e) {
    // A request object dies as soon as it is released: drop it from `active` first.
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](Request* r) { return std::find(seg.begin(), seg.end(), r) != seg.end(); }),
                 active.end());
    // An exhausted KV pool says so, as does an engine group that lost a rank (engine_group.hpp).
    const auto* known = dynamic_cast<const Error*>(&e);
    const mlpt_error_code code = known && (known->code() == MLPT_RESOURCE_EXHAUSTED || known->code() == MLPT_UNAVAILABLE)
                                     ? known->code()
                                     : MLPT_INTERNAL;
    std::lock_guard lk(mutex_);
    for (Request* r : seg) done.push_back(fail_locked(r, std::string("forward failed: ") + e.what(), code));
    return;
  }

  std::vector<size_t> to_sample;  // segments, each with its entry of out.sampled
  std::vector<std::pair<Request*, mlpt_finish_reason>> finished;
  int64_t prefilled = 0;
  std::vector<const Session*> publish;
  for (size_t i = 0; i < seg.size(); ++i) {
    Request* r = seg[i];
    Session& s = *r->session;
    if (r->in->out_tokens.empty()) prefilled += take[i];  // prompt tokens, not sampled ones fed back
    s.tokens.insert(s.tokens.end(), r->pending.begin(), r->pending.begin() + take[i]);
    if (r->in->record_routed_experts)
      s.routing.insert(s.routing.end(), out.routing.begin() + offsets[i] * per, out.routing.begin() + offsets[i + 1] * per);
    else
      s.routing.clear();  // a gap would misalign later positions
    r->pending.erase(r->pending.begin(), r->pending.begin() + take[i]);
    if (r->publish_at && s.tokens.size() == r->publish_at) {
      publish.push_back(&s);
      r->publish_at = 0;
    }
    if (!r->pending.empty()) continue;
    if (segments[i].sample)
      to_sample.push_back(i);
    else
      finished.push_back({r, r->final_reason});  // the final feed is done
  }

  {
    std::lock_guard lk(mutex_);
    prefill_tokens_ += prefilled;
    for (const Session* s : publish) prefixes_.put(*s, version);  // waiting requests take it next loop
  }

  for (size_t j = 0; j < to_sample.size(); ++j) {
    Request* r = seg[to_sample[j]];
    auto& in = *r->in;
    const uint64_t position = segments[to_sample[j]].counter;  // absolute position of the new token
    const SampledToken t = out.sampled[j];
    in.out_tokens.push_back(t.token);
    in.out_logprobs.push_back(t.logprob);
    bool stop = std::find(in.stop_tokens.begin(), in.stop_tokens.end(), t.token) != in.stop_tokens.end();
    bool length = static_cast<int32_t>(in.out_tokens.size()) >= in.max_new_tokens ||
                  static_cast<int64_t>(position + 1) >= max_sequence_length_;
    if (stop || length) {
      mlpt_finish_reason reason = stop ? MLPT_FINISH_STOP : MLPT_FINISH_LENGTH;
      if (in.record_routed_experts) {
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
  if (!finished.empty()) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](Request* r) {
                                  for (auto& f : finished)
                                    if (f.first == r) return true;
                                  return false;
                                }),
                 active.end());
    std::lock_guard lk(mutex_);
    for (auto& [r, reason] : finished) done.push_back(finish_locked(r, reason));  // r is gone once this returns
  }
}

}  // namespace mlpt::ref
