#include "core/dist/mpi/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/dist/run_messages.hpp"
#include "core/error.hpp"
#include "core/rl/batch_share.hpp"
#include "core/run/step_record.hpp"

namespace mlpt::dist {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kStopGrace = std::chrono::seconds(60);  // for the workers' cancelled episodes to report
}  // namespace

Coordinator::Coordinator(MpiChannel& channel, const Placement& placement, const PlacementSettings& settings)
    : channel_(channel),
      placement_(placement),
      answer_timeout_s_(settings.answer_timeout_s),
      heartbeat_timeout_s_(settings.heartbeat_timeout_s) {
  capacity_.assign(static_cast<size_t>(placement.rollout_workers()), 0);
  load_.assign(capacity_.size(), 0);
  serving_.assign(capacity_.size(), false);
  lost_.assign(capacity_.size(), false);
  for (int rank = 1; rank < placement.world_size(); ++rank) last_heard_[rank] = Clock::now();
  reader_ = std::thread([this] { read_messages(); });
  try {
    std::vector<TrainerReplicas::Replica> reported;
    for (int g = 0; g < placement.trainer_ranks(); ++g) {
      RunMessage m = *answer(placement.trainer_rank(g), "ready");
      can_save_state_ = can_save_state_ && m.body.at("can_save_state").get<bool>();
      const auto& dp = m.body.at("data_parallel");
      reported.push_back({dp.at("rank").get<int>(), dp.at("size").get<int>()});
    }
    replicas_.emplace(std::move(reported));
    for (int w = 0; w < placement.rollout_workers(); ++w) {
      // Every worker starts, or the run fails.
      RunMessage m = *answer(placement.rollout_worker_rank(w), "ready");
      std::lock_guard l(mutex_);
      serving_[static_cast<size_t>(w)] = true;
      capacity_[static_cast<size_t>(w)] = m.body.at("capacity").get<int64_t>();
      const auto& info = m.body.at("model");
      model_ = mlpt_engine_model_info{MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE, info.at("vocab_size").get<int64_t>(),
                                      info.at("num_moe_layers").get<int64_t>(), info.at("experts_per_token").get<int64_t>(),
                                      info.at("max_sequence_length").get<int64_t>(), info.at("weight_version").get<uint64_t>()};
      record_routed_experts_ = m.body.at("record_routed_experts").get<bool>();
      end_of_turn_token_ = m.body.at("end_of_turn_token").get<int32_t>();
    }
  } catch (...) {
    stop();
    reading_ = false;
    reader_.join();
    throw;
  }
}

Coordinator::~Coordinator() {
  stop();
  reading_ = false;
  if (reader_.joinable()) reader_.join();
}

void Coordinator::read_messages() {
  int delay_us = 20;
  auto next_check = Clock::now();
  while (reading_.load()) {
    std::optional<RunMessage> m;
    try {
      m = channel_.poll();
    } catch (const Error& e) {
      std::lock_guard l(mutex_);
      if (!failure_) failure_ = std::string("coordinator: ") + e.what();
      changed_.notify_all();
      continue;
    }
    if (!m) {
      // Judged only with nothing left unread: a heartbeat that waited in MPI still counts.
      if (Clock::now() >= next_check)
        check_heartbeats(), next_check = Clock::now() + std::chrono::milliseconds(100);
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      delay_us = std::min(delay_us * 2, 1000);
      continue;
    }
    delay_us = 20;
    last_heard_[m->from] = Clock::now();
    if (m->kind == "heartbeat") continue;
    if (m->kind == "trajectory") {
      const uint64_t id = m->body.at("id").get<uint64_t>();
      std::optional<Episode> e;
      {
        std::lock_guard l(mutex_);
        if (auto it = episodes_.find(id); it != episodes_.end()) {
          e = std::move(it->second);
          episodes_.erase(it);
          --load_[static_cast<size_t>(e->worker)];
          ++reporting_;
        }
      }
      if (!e) continue;  // dropped when stopping
      changed_.notify_all();
      const std::string where = placement_.describe(placement_.rollout_worker_rank(e->worker));
      if (m->body.contains("trajectory")) {
        rollout::Trajectory t;
        std::exception_ptr error;
        try {
          t = trajectory_from(m->body["trajectory"]);
          t.rollout_worker = where;
        } catch (...) {
          error = std::current_exception();
        }
        e->done(std::move(t), error);
      } else {
        const auto& err = m->body.at("error");
        e->done({}, std::make_exception_ptr(Error(static_cast<mlpt_error_code>(err.at("code").get<int>()),
                                                  err.at("message").get<std::string>() + " (on " + where + ")")));
      }
      reported(1);
      continue;
    }
    if (m->kind == "failed") {
      lose(m->from, m->body.at("message").get<std::string>(), /*by_report=*/true);
      continue;
    }
    std::lock_guard l(mutex_);
    if (lost(m->from)) continue;  // a worker dropped as silent that was only slow: its answers come too late
    answers_[m->from].push_back(std::move(*m));
    changed_.notify_all();
  }
}

void Coordinator::check_heartbeats() {
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(heartbeat_timeout_s_ * 1000));
  {
    std::lock_guard l(mutex_);
    // A trainer rank's report of a broken refit: no other rank went silent meanwhile, so it is the
    // run's failure.
    if (sender_report_ && !failure_ && now - sender_report_->at > limit + std::chrono::seconds(1)) {
      failure_ = sender_report_->message;
      changed_.notify_all();
    }
  }
  for (auto& [rank, heard] : last_heard_) {
    if (now - heard <= limit) continue;
    {
      std::lock_guard l(mutex_);
      if (stopped_) return;  // ranks end once told to stop
      if (lost(rank) || failure_ || (sender_report_ && sender_report_->rank == rank)) continue;
    }
    lose(rank, "no heartbeat for " + std::to_string(static_cast<int64_t>(heartbeat_timeout_s_)) +
                   " s ([placement] heartbeat_timeout_s): it died, lost its node, or hangs",
         /*by_report=*/false);
  }
}

bool Coordinator::lost(int rank) const {
  const int w = placement_.rollout_worker_index(rank);
  return w >= 0 && lost_[static_cast<size_t>(w)];
}

void Coordinator::lose(int rank, const std::string& why, bool by_report) {
  const int w = placement_.rollout_worker_index(rank);
  const std::string name = placement_.describe(rank);
  // A rank's own failure report names it already.
  const std::string message = why.rfind(name, 0) == 0 ? why : name + ": " + why;
  std::vector<Episode> in_flight;
  int left = 0;
  {
    std::lock_guard l(mutex_);
    if (w < 0 || !serving_[static_cast<size_t>(w)]) {  // a trainer rank, or a worker that never started
      if (failure_) return;
      if (w < 0 && by_report && senders_answering_) {  // a broken refit: caused here, or by the workers?
        if (last_worker_lost_)
          failure_ = "every rollout worker is lost; the last: " + *last_worker_lost_;
        else if (!sender_report_)
          sender_report_ = SenderReport{rank, message, Clock::now()};
      } else {
        failure_ = message;
      }
      changed_.notify_all();
      return;
    }
    if (lost_[static_cast<size_t>(w)]) return;
    lost_[static_cast<size_t>(w)] = true;
    capacity_[static_cast<size_t>(w)] = 0;
    for (auto it = episodes_.begin(); it != episodes_.end();)
      if (it->second.worker == w) {
        ++reporting_;
        in_flight.push_back(std::move(it->second));
        it = episodes_.erase(it);
      } else {
        ++it;
      }
    load_[static_cast<size_t>(w)] = 0;
    answers_.erase(placement_.rollout_worker_rank(w));
    lost_workers_.push_back(message);
    left = static_cast<int>(std::count(lost_.begin(), lost_.end(), false));
    if (left == 0 && !failure_) {
      if (senders_answering_ && by_report && !sender_report_)
        last_worker_lost_ = message;  // the run's failure once the senders have answered (deliver_weights)
      else
        failure_ = "every rollout worker is lost; the last: " + message;
    }
    changed_.notify_all();
  }
  // The benchmark's rule for a rollout lost to an infrastructure failure (spec section 1): back-fill
  // it with reward 0 and count it, as the reference does (re-running it elsewhere would not be).
  std::fprintf(stderr,
               "mlpt run: %s\nmlpt run: %s is dropped: its %zu episode(s) in flight are back-filled with reward 0 "
               "as failed rollouts; %d rollout worker(s) go on\n",
               message.c_str(), name.c_str(), in_flight.size(), left);
  // Should it be alive after all (only slow), it stops: nothing is sent to it any more. The ranks of
  // an engine group leave at once instead (heartbeat.hpp): they may be held in the group's
  // collectives, waiting for the lost rank forever.
  for (int g = 0; g < placement_.engine_ranks(); ++g) {
    const int to = placement_.rollout_worker_rank(w, g);
    try {
      if (placement_.engine_ranks() > 1)
        channel_.send_notice(to, "leave", [] { return true; });  // never waits for it
      else
        channel_.send(to, "stop", {{"rank_lost", true}}, [] { return true; });
    } catch (const Error&) {
    }
  }
  // Without a worker the run ends: its back-filled episodes say so, whichever failure the run
  // reports first (they may push it over max_rollout_failure_rate before it hears of this one).
  const std::string lost = name + " is lost (" + why + ")" + (left == 0 ? "; every rollout worker is lost" : "");
  for (auto& e : in_flight) e.done({}, std::make_exception_ptr(Error(MLPT_UNAVAILABLE, lost)));
  reported(static_cast<int>(in_flight.size()));
}

std::vector<std::string> Coordinator::lost_workers() const {
  std::lock_guard l(mutex_);
  return lost_workers_;
}

void Coordinator::send_unless_lost(int rank, const std::string& kind, const nlohmann::json& body) {
  auto is_lost = [this, rank] {
    std::lock_guard l(mutex_);
    return lost(rank);
  };
  if (is_lost()) return;
  try {
    // A large message waits for its receiver: one that died meanwhile would hold this forever.
    channel_.send(rank, kind, body, is_lost);
  } catch (const Error&) {
    if (!is_lost()) throw;  // it was lost meanwhile: the message had nowhere to go
  }
}

void Coordinator::send_to_trainer(int g, const std::string& kind, const nlohmann::json& body) {
  // A large message waits for its receiver (MPI's rendezvous protocol): a trainer rank that died or
  // hangs would hold the coordinator in the send forever, before any answer could time out.
  const int rank = placement_.trainer_rank(g);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(answer_timeout_s_ * 1000));
  bool timed_out = false;
  const bool sent = channel_.send(rank, kind, body, [&] {
    if (run_failed()) return true;
    timed_out = Clock::now() >= deadline;
    return timed_out;
  });
  if (sent) return;
  std::lock_guard l(mutex_);
  if (timed_out && !failure_)
    failure_ = placement_.describe(rank) + " did not take '" + kind + "' within " +
               std::to_string(static_cast<int64_t>(answer_timeout_s_)) + " s ([placement] answer_timeout_s): it is hung or gone";
  changed_.notify_all();
  throw_if_failed();
}

void Coordinator::reported(int episodes) {
  std::lock_guard l(mutex_);
  reporting_ -= episodes;
  changed_.notify_all();
}

bool Coordinator::run_failed() const {
  std::lock_guard l(mutex_);
  return failure_.has_value();
}

bool Coordinator::any_rank_lost() const {
  std::lock_guard l(mutex_);
  return failure_.has_value() || !lost_workers_.empty();
}

void Coordinator::throw_if_failed() {
  if (failure_) throw Error(MLPT_ABORTED, *failure_);
}

std::optional<RunMessage> Coordinator::answer(int rank, const std::string& kind) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(answer_timeout_s_ * 1000));
  std::unique_lock l(mutex_);
  for (;;) {
    throw_if_failed();
    if (lost(rank)) return std::nullopt;
    auto& queue = answers_[rank];
    if (!queue.empty()) {
      RunMessage m = std::move(queue.front());
      queue.pop_front();
      if (m.kind != kind)
        throw Error(MLPT_INTERNAL, placement_.describe(rank) + " answered '" + m.kind + "' where '" + kind + "' was expected");
      return m;
    }
    if (changed_.wait_until(l, deadline) == std::cv_status::timeout && answers_[rank].empty() && !failure_ &&
        !lost(rank)) {
      failure_ = placement_.describe(rank) + " did not answer '" + kind + "' within " +
                 std::to_string(static_cast<int64_t>(answer_timeout_s_)) + " s ([placement] answer_timeout_s): it is hung or gone";
      changed_.notify_all();
      throw Error(MLPT_DEADLINE_EXCEEDED, *failure_);
    }
  }
}

void Coordinator::start(rollout::EpisodeRequest request, rollout::EpisodeDone done) {
  const uint64_t id = request.id;
  nlohmann::json message = episode_json(request);
  int worker = -1;
  {
    std::unique_lock l(mutex_);
    for (;;) {
      throw_if_failed();
      if (stopped_) throw Error(MLPT_CANCELLED, "the run is stopping");
      int64_t most_free = 0;
      for (size_t w = 0; w < load_.size(); ++w)
        if (capacity_[w] - load_[w] > most_free) most_free = capacity_[w] - load_[w], worker = static_cast<int>(w);
      if (worker >= 0) break;
      changed_.wait(l);
    }
    ++load_[static_cast<size_t>(worker)];
    episodes_.emplace(id, Episode{worker, std::move(request), std::move(done)});
  }
  // A worker lost meanwhile has back-filled this episode already.
  send_unless_lost(placement_.rollout_worker_rank(worker), "episode", message);
}

void Coordinator::wait_idle() {
  std::unique_lock l(mutex_);
  changed_.wait(l, [this] { return episodes_.empty() && reporting_ == 0; });
}

int64_t Coordinator::in_flight() const {
  std::lock_guard l(mutex_);
  return static_cast<int64_t>(episodes_.size());
}

std::map<std::string, int64_t> Coordinator::in_flight_by_worker() const {
  std::map<std::string, int64_t> by_worker;
  std::lock_guard l(mutex_);
  for (size_t w = 0; w < load_.size(); ++w)
    by_worker[placement_.describe(placement_.rollout_worker_rank(static_cast<int>(w)))] =
        lost_[w] ? 0 : load_[w];
  return by_worker;
}

void Coordinator::cancel(const std::vector<uint64_t>& ids) {
  std::map<int, nlohmann::json> by_worker;
  {
    std::lock_guard l(mutex_);
    for (auto id : ids)
      if (auto it = episodes_.find(id); it != episodes_.end()) by_worker[it->second.worker].push_back(id);
  }
  for (auto& [worker, list] : by_worker)
    send_unless_lost(placement_.rollout_worker_rank(worker), "cancel", {{"ids", list}});
}

std::vector<components::Metric> Coordinator::train_step(const mlpt_train_batch& batch, uint64_t* new_version) {
  const int64_t global_tokens = rl::global_loss_tokens(batch);
  // One share per data-parallel replica; the ranks of a replica get the same bytes.
  const auto shares = encoded_shares(batch, replicas_->shares());
  for (int g = 0; g < placement_.trainer_ranks(); ++g)
    send_to_trainer(g, "train",
                    {{"share", shares[static_cast<size_t>(replicas_->share_of(g))]}, {"global_num_loss_tokens", global_tokens}});
  std::vector<components::Metric> metrics;
  for (int g = 0; g < placement_.trainer_ranks(); ++g) {
    RunMessage m = *answer(placement_.trainer_rank(g), "trained");
    if (g != 0) continue;
    if (new_version) *new_version = m.body.at("version").get<uint64_t>();
    for (auto& [name, value] : m.body.at("metrics").items()) metrics.push_back({name, value.get<double>()});
  }
  return metrics;
}

refit::RefitStats Coordinator::deliver_weights(uint64_t version) {
  // The transport's sender drops a receiver whose process is gone, so a lost worker holds up
  // neither the publishing trainer ranks' sends nor this wait. The ranks of replica 0 publish
  // together, each its own shards.
  // Meanwhile reports of a broken transfer wait for the ranks' heartbeats to say who caused it
  // (lose, check_heartbeats); losing every worker by their reports fails the run once every sender
  // has answered.
  struct SendersAnswering {
    Coordinator& c;
    explicit SendersAnswering(Coordinator& coordinator) : c(coordinator) {
      std::lock_guard l(c.mutex_);
      c.senders_answering_ = true;
    }
    void answered() {
      std::lock_guard l(c.mutex_);
      c.senders_answering_ = false;
      if (c.last_worker_lost_ && !c.failure_)
        c.failure_ = "every rollout worker is lost; the last: " + *c.last_worker_lost_;
      c.changed_.notify_all();
      c.throw_if_failed();
    }
    ~SendersAnswering() {  // answered (above), or the run failed: what was held is moot
      std::lock_guard l(c.mutex_);
      c.senders_answering_ = false;
      c.last_worker_lost_.reset();
      c.sender_report_.reset();
    }
  } senders(*this);
  for (int g : replicas_->publishers()) send_to_trainer(g, "publish", {{"version", version}});
  for (int w = 0; w < placement_.rollout_workers(); ++w)  // every rank of an engine group loads it
    for (int g = 0; g < placement_.engine_ranks(); ++g)
      send_unless_lost(placement_.rollout_worker_rank(w, g), "refit", {{"version", version}});
  refit::RefitStats stats;
  for (int g : replicas_->publishers()) {
    const auto sent = run::refit_stats_from_json(answer(placement_.trainer_rank(g), "published")->body.at("refit"));
    if (g == replicas_->publishers().front()) {
      stats = sent;
    } else {  // every rank's part of a dense refit
      stats.bytes += sent.bytes;
      stats.dense_bytes += sent.dense_bytes;
    }
  }
  senders.answered();
  for (int w = 0; w < placement_.rollout_workers(); ++w)
    answer(placement_.rollout_worker_rank(w), "refitted");
  return stats;
}

void Coordinator::save_state(const std::string& dir) {
  for (int g = 0; g < placement_.trainer_ranks(); ++g) send_to_trainer(g, "save", {{"dir", dir}});
  for (int g = 0; g < placement_.trainer_ranks(); ++g) answer(placement_.trainer_rank(g), "saved");
}

uint64_t Coordinator::load_state(const std::string& dir) {
  for (int g = 0; g < placement_.trainer_ranks(); ++g) send_to_trainer(g, "load", {{"dir", dir}});
  uint64_t version = 0;
  for (int g = 0; g < placement_.trainer_ranks(); ++g) {
    RunMessage m = *answer(placement_.trainer_rank(g), "loaded");
    if (g == 0) version = m.body.at("version").get<uint64_t>();
  }
  return version;
}

void Coordinator::stop() {
  bool rank_lost = false;
  {
    std::lock_guard l(mutex_);
    if (stopped_) return;
    stopped_ = true;
    // A lost rank never reaches MPI_Finalize, where every other rank would wait for it.
    rank_lost = failure_.has_value() || !lost_workers_.empty();
  }
  changed_.notify_all();
  for (int rank = 1; rank < placement_.world_size(); ++rank) {
    try {
      send_unless_lost(rank, "stop", {{"rank_lost", rank_lost}});
    } catch (const Error&) {  // a rank that is gone
    }
  }
  // The workers cancel their episodes and report each; wait for them (bounded: a worker may be
  // gone). What has not come back by then is dropped: no callback runs after this returns.
  std::unique_lock l(mutex_);
  changed_.wait_for(l, kStopGrace, [this] { return episodes_.empty() && reporting_ == 0; });
  episodes_.clear();
  changed_.wait(l, [this] { return reporting_ == 0; });
}

}  // namespace mlpt::dist
