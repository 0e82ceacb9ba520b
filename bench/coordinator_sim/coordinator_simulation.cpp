#include "bench/coordinator_sim/coordinator_simulation.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "bench/coordinator_sim/engine_replica.hpp"
#include "bench/coordinator_sim/episode_draw.hpp"
#include "bench/coordinator_sim/event_clock.hpp"
#include "core/error.hpp"
#include "core/rl/group_buffer.hpp"
#include "core/rl/rollout_scheduler.hpp"
#include "core/rl/train_batch.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::coordinator_sim {
namespace {

class Coordinator {
 public:
  Coordinator(const SimulationModel& model, const Placement& placement, uint64_t seed)
      : model_(model),
        loop_(model.loop),
        seed_(seed),
        scheduler_(loop_.prompts_per_step, static_cast<int32_t>(loop_.generations_per_prompt), loop_.max_trajectory_age_steps,
                   loop_.steps),
        buffer_(static_cast<int>(loop_.generations_per_prompt)),
        free_slots_(placement.concurrent_episodes) {
    result_.placement = placement;
    result_.engine_replicas = engine_replicas(placement, model);
    replicas_.assign(static_cast<size_t>(result_.engine_replicas), EngineReplica(model.engine));
    replica_epoch_.assign(replicas_.size(), 0);
    trainer_gpus_ = static_cast<double>(placement.trainer_nodes * placement.gpus_per_node);
  }

  SimulationResult run() {
    scheduler_.set_weight_version(0);
    fill_slots();
    begin_step();
    clock_.run([&] { return phase_ == Phase::kDone; });
    if (phase_ != Phase::kDone)
      throw Error(MLPT_INTERNAL, "simulation stalled at step " + std::to_string(step_) + " with " +
                                     std::to_string(scheduler_.in_flight()) + " episodes in flight");
    const double wall = clock_.now();
    double idle = 0, sequences = 0, train = 0;
    for (auto& r : replicas_) r.advance(wall), idle += r.idle_s(), sequences += r.sequence_s();
    for (const auto& s : result_.steps) train += s.train_s;
    const double engine_time = wall * static_cast<double>(replicas_.size());
    result_.wall_s = wall;
    result_.engine_idle_fraction = idle / engine_time;
    result_.mean_decode_batch = sequences / engine_time;
    result_.trainer_idle_fraction = 1.0 - train / wall;
    return result_;
  }

 private:
  enum class Phase { kWaiting, kTraining, kDraining, kRefit, kValidationDrain, kValidating, kDone };
  struct Episode {
    int64_t prompt_index = 0, sample_index = 0;
    bool validation = false;
    size_t replica = 0;
    EpisodeWork work;
    size_t turn = 0;
    double started_s = 0;
    uint64_t min_version = UINT64_MAX, max_version = 0;
  };

  // ---- Episodes ---------------------------------------------------------------------------------

  void fill_slots() {
    while (free_slots_ > 0)
      if (auto job = scheduler_.try_next()) start_episode(job->prompt_index, job->sample_index, false);
      else break;
  }

  void start_episode(int64_t prompt_index, int64_t sample_index, bool validation) {
    --free_slots_;
    result_.max_episodes_in_flight = std::max(result_.max_episodes_in_flight, result_.placement.concurrent_episodes - free_slots_);
    // The coordinator hands the episode to the replica with the fewest episodes (free capacity).
    auto least = std::min_element(replicas_.begin(), replicas_.end(), [](const auto& a, const auto& b) { return a.episodes < b.episodes; });
    ++least->episodes;
    Episode e{prompt_index, sample_index, validation, static_cast<size_t>(least - replicas_.begin()),
              draw_episode(model_.episode, seed_, prompt_index, sample_index, validation), 0, clock_.now()};
    const int64_t id = next_episode_id_++;
    const double start_s = e.work.sandbox_start_s;
    episodes_.emplace(id, std::move(e));
    clock_.after(start_s, [this, id] { next_turn(id); });
  }

  void next_turn(int64_t id) {
    Episode& e = episodes_.at(id);
    const bool timed_out = clock_.now() - e.started_s > rules::kAgentTimeoutSeconds;
    if (timed_out) ++result_.agent_timeouts;  // reward 0, nothing graded
    if (timed_out || e.turn == e.work.reply_tokens.size()) {
      clock_.after(timed_out ? 0.0 : e.work.test_s, [this, id] { finish_episode(id); });
      return;
    }
    e.min_version = std::min(e.min_version, version_), e.max_version = std::max(e.max_version, version_);
    auto& replica = replicas_[e.replica];
    replica.advance(clock_.now());
    replica.add(id, e.work.reply_tokens[e.turn]);
    schedule_replica(e.replica);
  }

  // The batch changed: the replica's next finished reply moves; an older prediction is void.
  void schedule_replica(size_t r) {
    const uint64_t epoch = ++replica_epoch_[r];
    auto at = replicas_[r].next_finish();
    if (!at) return;
    clock_.at(*at, [this, r, epoch] {
      if (replica_epoch_[r] != epoch) return;
      replicas_[r].advance(clock_.now());
      for (int64_t id : replicas_[r].take_finished()) {
        Episode& e = episodes_.at(id);
        clock_.after(e.work.command_s[e.turn++], [this, id] { next_turn(id); });
      }
      schedule_replica(r);
    });
  }

  void finish_episode(int64_t id) {
    Episode e = std::move(episodes_.at(id));
    episodes_.erase(id);
    --replicas_[e.replica].episodes;
    ++free_slots_;
    ++result_.episodes;
    if (e.validation) {
      ++validations_done_;
      start_validation_episodes();
      if (validations_done_ == validation_total()) end_validation();
      return;
    }
    rollout::Trajectory t;
    t.prompt_index = e.prompt_index;
    t.sample_index = static_cast<int32_t>(e.sample_index);
    t.min_weight_version = e.min_version, t.max_weight_version = e.max_version;
    tokens_[key(e.prompt_index, e.sample_index)] = e.work.tokens;
    buffer_.add(std::move(t));
    scheduler_.done();
    if (phase_ == Phase::kWaiting) begin_step();
    else if (phase_ == Phase::kDraining && scheduler_.in_flight() == 0) start_refit();
    else if (phase_ == Phase::kValidationDrain && scheduler_.in_flight() == 0) start_validation();
    fill_slots();
  }

  int64_t key(int64_t prompt, int64_t sample) const { return prompt * loop_.generations_per_prompt + sample; }

  // ---- The step loop (BenchmarkRun's order) --------------------------------------------------------

  void begin_step() {
    phase_ = Phase::kWaiting;
    if (step_ == loop_.steps) {
      phase_ = Phase::kDone;
      return;
    }
    auto groups = buffer_.take(step_ * loop_.prompts_per_step, loop_.prompts_per_step, [] { return true; });
    if (!groups.empty()) train(groups);
  }

  void train(const std::vector<rl::Group>& groups) {
    rl::TrainBatch batch(groups, rules::kAdvantageEpsilon, version_, false, 0, 0);
    current_.wait_s = clock_.now() - waiting_since_;
    current_.sequences = batch.statistics().sequences;
    current_.max_staleness = batch.statistics().max_staleness;
    if (current_.max_staleness > static_cast<uint64_t>(loop_.max_trajectory_age_steps))
      throw Error(MLPT_INTERNAL, "simulation: staleness " + std::to_string(current_.max_staleness) + " exceeds max_trajectory_age_steps");
    for (const auto& g : groups)
      for (const auto& s : g.samples) {
        ++result_.staleness[version_ - s.min_weight_version];
        result_.mixed_version += s.min_weight_version != s.max_weight_version;
        auto it = tokens_.find(key(g.prompt_index, s.sample_index));
        current_.tokens += it->second;
        tokens_.erase(it);
      }
    const auto& t = model_.trainer;
    current_.train_s = t.optimizer_step_s + 8.0 * t.active_parameters * static_cast<double>(current_.tokens) / (trainer_gpus_ * t.flops_per_gpu);
    phase_ = Phase::kTraining;
    clock_.after(current_.train_s, [this] { end_training(); });
  }

  void end_training() {
    scheduler_.pause();
    phase_ = Phase::kDraining;
    drain_since_ = clock_.now();
    if (loop_.in_flight_weight_updates || scheduler_.in_flight() == 0) start_refit();
  }

  void start_refit() {
    current_.drain_s = clock_.now() - drain_since_;
    current_.refit_s = model_.trainer.refit_s;
    phase_ = Phase::kRefit;
    set_engines_paused(true);
    clock_.after(current_.refit_s, [this] { end_refit(); });
  }

  void set_engines_paused(bool paused) {
    for (size_t r = 0; r < replicas_.size(); ++r) {
      replicas_[r].advance(clock_.now());
      paused ? replicas_[r].pause() : replicas_[r].resume();
      schedule_replica(r);
    }
  }

  void end_refit() {
    ++version_;  // the engines hold the new weights before they decode again
    set_engines_paused(false);
    scheduler_.set_weight_version(version_);
    scheduler_.resume();
    fill_slots();
    ++step_;
    if (!rules::is_eval_point(loop_.prompts_per_step * loop_.generations_per_prompt, step_ * loop_.prompts_per_step * loop_.generations_per_prompt))
      return finish_step();
    // Validation pauses and drains the training episodes that started since the resume.
    scheduler_.pause();
    phase_ = Phase::kValidationDrain;
    validation_since_ = clock_.now();
    if (scheduler_.in_flight() == 0) start_validation();
  }

  int64_t validation_total() const { return loop_.validation_tasks * rules::kEvalPassK; }

  void start_validation() {
    phase_ = Phase::kValidating;
    validations_started_ = validations_done_ = 0;
    start_validation_episodes();
  }

  void start_validation_episodes() {
    while (free_slots_ > 0 && validations_started_ < validation_total()) {
      // Each evaluation samples the same tasks afresh: its episodes draw new work.
      const int64_t j = validations_started_++, task = result_.validations * loop_.validation_tasks + j / rules::kEvalPassK;
      start_episode(-1 - task, j % rules::kEvalPassK, true);
    }
  }

  void end_validation() {
    current_.validation_s = clock_.now() - validation_since_;
    ++result_.validations;
    scheduler_.resume();
    fill_slots();
    finish_step();
  }

  void finish_step() {
    result_.steps.push_back(current_);
    current_ = {};
    waiting_since_ = clock_.now();
    begin_step();
  }

  const SimulationModel& model_;
  const LoopSettings& loop_;
  const uint64_t seed_;
  EventClock clock_;
  rl::RolloutScheduler scheduler_;
  rl::GroupBuffer buffer_;
  std::vector<EngineReplica> replicas_;
  std::vector<uint64_t> replica_epoch_;
  std::unordered_map<int64_t, Episode> episodes_;
  std::unordered_map<int64_t, int64_t> tokens_;  // trajectory length by key(prompt, sample), until trained
  int64_t next_episode_id_ = 0, free_slots_ = 0;
  int64_t validations_started_ = 0, validations_done_ = 0;
  double trainer_gpus_ = 0, waiting_since_ = 0, drain_since_ = 0, validation_since_ = 0;
  Phase phase_ = Phase::kWaiting;
  int64_t step_ = 0;
  uint64_t version_ = 0;
  StepTiming current_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate(const SimulationModel& model, const Placement& placement, uint64_t seed) {
  return Coordinator(model, placement, seed).run();
}

}  // namespace mlpt::coordinator_sim
