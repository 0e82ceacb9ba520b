#include "core/dist/mpi/coordinator.hpp"

#include <chrono>

#include "core/dist/run_messages.hpp"
#include "core/error.hpp"
#include "core/rl/batch_share.hpp"

namespace mlpt::dist {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kStopGrace = std::chrono::seconds(60);  // for the workers' cancelled episodes to report
}  // namespace

Coordinator::Coordinator(MpiChannel& channel, const Placement& placement, double answer_timeout_s)
    : channel_(channel), placement_(placement), answer_timeout_s_(answer_timeout_s) {
  capacity_.assign(static_cast<size_t>(placement.rollout_workers()), 0);
  load_.assign(capacity_.size(), 0);
  reader_ = std::thread([this] { read_messages(); });
  try {
    for (int g = 0; g < placement.trainer_ranks(); ++g) {
      RunMessage m = answer(placement.trainer_rank(g), "ready");
      can_save_state_ = can_save_state_ && m.body.at("can_save_state").get<bool>();
    }
    for (int w = 0; w < placement.rollout_workers(); ++w) {
      RunMessage m = answer(placement.rollout_worker_rank(w), "ready");
      std::lock_guard l(mutex_);
      capacity_[static_cast<size_t>(w)] = m.body.at("capacity").get<int64_t>();
      const auto& info = m.body.at("model");
      model_ = mlpt_engine_model_info{MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE, info.at("vocab_size").get<int64_t>(),
                                      info.at("num_moe_layers").get<int64_t>(), info.at("experts_per_token").get<int64_t>(),
                                      info.at("max_sequence_length").get<int64_t>(), info.at("weight_version").get<uint64_t>()};
      record_routed_experts_ = m.body.at("record_routed_experts").get<bool>();
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
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      delay_us = std::min(delay_us * 2, 1000);
      continue;
    }
    delay_us = 20;
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
      // The rank has stopped: its episodes will never come back.
      std::vector<Episode> lost;
      {
        std::lock_guard l(mutex_);
        if (!failure_) failure_ = m->body.at("message").get<std::string>();
        const int worker = placement_.rollout_worker_index(m->from);
        for (auto it = episodes_.begin(); it != episodes_.end();)
          if (it->second.worker == worker) {
            --load_[static_cast<size_t>(worker)];
            ++reporting_;
            lost.push_back(std::move(it->second));
            it = episodes_.erase(it);
          } else {
            ++it;
          }
      }
      changed_.notify_all();
      for (auto& e : lost) e.done({}, std::make_exception_ptr(Error(MLPT_UNAVAILABLE, m->body.at("message").get<std::string>())));
      reported(static_cast<int>(lost.size()));
      continue;
    }
    std::lock_guard l(mutex_);
    answers_[m->from].push_back(std::move(*m));
    changed_.notify_all();
  }
}

void Coordinator::reported(int episodes) {
  std::lock_guard l(mutex_);
  reporting_ -= episodes;
  changed_.notify_all();
}

bool Coordinator::rank_lost() const {
  std::lock_guard l(mutex_);
  return failure_.has_value();
}

void Coordinator::throw_if_failed() {
  if (failure_) throw Error(MLPT_ABORTED, *failure_);
}

RunMessage Coordinator::answer(int rank, const std::string& kind) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(answer_timeout_s_ * 1000));
  std::unique_lock l(mutex_);
  for (;;) {
    throw_if_failed();
    auto& queue = answers_[rank];
    if (!queue.empty()) {
      RunMessage m = std::move(queue.front());
      queue.pop_front();
      if (m.kind != kind)
        throw Error(MLPT_INTERNAL, placement_.describe(rank) + " answered '" + m.kind + "' where '" + kind + "' was expected");
      return m;
    }
    if (changed_.wait_until(l, deadline) == std::cv_status::timeout && answers_[rank].empty() && !failure_) {
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
  channel_.send(placement_.rollout_worker_rank(worker), "episode", message);
}

void Coordinator::wait_idle() {
  std::unique_lock l(mutex_);
  changed_.wait(l, [this] { return episodes_.empty() && reporting_ == 0; });
}

int64_t Coordinator::in_flight() const {
  std::lock_guard l(mutex_);
  return static_cast<int64_t>(episodes_.size());
}

void Coordinator::cancel(const std::vector<uint64_t>& ids) {
  std::map<int, nlohmann::json> by_worker;
  {
    std::lock_guard l(mutex_);
    for (auto id : ids)
      if (auto it = episodes_.find(id); it != episodes_.end()) by_worker[it->second.worker].push_back(id);
  }
  for (auto& [worker, list] : by_worker) channel_.send(placement_.rollout_worker_rank(worker), "cancel", {{"ids", list}});
}

std::vector<components::Metric> Coordinator::train_step(const mlpt_train_batch& batch, uint64_t* new_version) {
  const int64_t global_tokens = rl::global_loss_tokens(batch);
  for (int g = 0; g < placement_.trainer_ranks(); ++g) {
    rl::BatchShare share(batch, g, placement_.trainer_ranks());
    channel_.send(placement_.trainer_rank(g), "train", {{"share", batch_json(*share.abi())}, {"global_num_loss_tokens", global_tokens}});
  }
  std::vector<components::Metric> metrics;
  for (int g = 0; g < placement_.trainer_ranks(); ++g) {
    RunMessage m = answer(placement_.trainer_rank(g), "trained");
    if (g != 0) continue;
    if (new_version) *new_version = m.body.at("version").get<uint64_t>();
    for (auto& [name, value] : m.body.at("metrics").items()) metrics.push_back({name, value.get<double>()});
  }
  return metrics;
}

void Coordinator::publish(uint64_t version) {
  channel_.send(placement_.trainer_rank(0), "publish", {{"version", version}});
  for (int w = 0; w < placement_.rollout_workers(); ++w)
    channel_.send(placement_.rollout_worker_rank(w), "refit", {{"version", version}});
  answer(placement_.trainer_rank(0), "published");
  for (int w = 0; w < placement_.rollout_workers(); ++w) answer(placement_.rollout_worker_rank(w), "refitted");
}

void Coordinator::save_state(const std::string& dir) {
  for (int g = 0; g < placement_.trainer_ranks(); ++g) channel_.send(placement_.trainer_rank(g), "save", {{"dir", dir}});
  for (int g = 0; g < placement_.trainer_ranks(); ++g) answer(placement_.trainer_rank(g), "saved");
}

uint64_t Coordinator::load_state(const std::string& dir) {
  for (int g = 0; g < placement_.trainer_ranks(); ++g) channel_.send(placement_.trainer_rank(g), "load", {{"dir", dir}});
  uint64_t version = 0;
  for (int g = 0; g < placement_.trainer_ranks(); ++g) {
    RunMessage m = answer(placement_.trainer_rank(g), "loaded");
    if (g == 0) version = m.body.at("version").get<uint64_t>();
  }
  return version;
}

void Coordinator::stop() {
  {
    std::lock_guard l(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  changed_.notify_all();
  for (int rank = 1; rank < placement_.world_size(); ++rank) {
    try {
      channel_.send(rank, "stop");
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
