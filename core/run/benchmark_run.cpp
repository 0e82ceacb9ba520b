#include "core/run/benchmark_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "core/eval/pass_at_k.hpp"
#include "core/mllog/init_block.hpp"
#include "core/mllog/keys.hpp"
#include "core/rl/group_buffer.hpp"
#include "core/rl/rollout_scheduler.hpp"
#include "core/rl/train_batch.hpp"
#include "core/rules/closed_division.hpp"
#include "core/run/checkpoint.hpp"
#include "core/run/crash_guard.hpp"
#include "core/run/dataset.hpp"
#include "core/run/episode_requests.hpp"
#include "core/run/in_flight_requests.hpp"
#include "core/run/local_placement.hpp"
#include "core/run/plugin_metrics.hpp"
#include "core/run/report.hpp"
#include "core/run/rollout_record.hpp"
#include "core/run/run_dir.hpp"
#include "core/run/run_hyperparameters.hpp"
#include "core/run/run_observer.hpp"
#include "core/run/run_totals.hpp"
#include "core/run/step_record.hpp"

namespace mlpt::run {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class BenchmarkRun {
 public:
  BenchmarkRun(const RunConfig& c, const RunOptions& o) : config_(c), options_(o) {}
  RunSummary run();

 private:
  // The run folder, the result log and the observer; what a resumed run starts from.
  void open(const RunStart& start);
  // The datasets, the init block of the result log, and the components where they run.
  void initialise(const RunStart& start);
  // A resumed run's trainer state and position; the engines get the checkpoint's weights.
  void restore(const CheckpointState& state, CrashGuard& crash_guard);
  // One GRPO step: a batch of groups, a train step, the new weights to the engines, a validation
  // from the first eval point on, the metrics row, and a checkpoint when one is due. False when
  // the run stops before its batch is complete.
  bool step(int64_t step, CrashGuard& crash_guard);
  void save_checkpoint_after(int64_t step, int64_t samples, CrashGuard& crash_guard);
  // Closes the result log and writes the report; returns what the run reached.
  RunSummary finish(bool run_started, CrashGuard& crash_guard);

  void start_rollouts();
  void stop_rollouts();
  void feed_rollouts();
  void settle(std::exception_ptr error, const std::string& what, const std::function<void()>& on_success,
              const std::function<void(const std::string&)>& on_failure);
  // Moves the trainer's weights of `version` to the engines; returns what was moved. Training
  // rollouts start again afterwards unless `then_validate` (validation pauses them anyway, and
  // episodes started in between would only delay it).
  refit::RefitStats update_weights(uint64_t version, bool then_validate);
  // A rollout that failed for an infrastructure reason: counted, and the run fails once failures
  // pass max_rollout_failure_rate. Returns the zero-reward trajectory that stands in for it.
  // What a failed rollout trains as; it goes on the timeline from `started_at` (observer time).
  rollout::Trajectory back_fill(const rollout::EpisodeRequest& request, const std::string& reason,
                                bool validation, double started_at);
  std::optional<eval::PassAtK> validate(int64_t samples);
  void progress_loop();
  // gradient_accumulation_steps and micro_batch_size, logged once the first step shows the trainer's
  // real micro-batch count (its "micro_batches" metric; 1 when it reports none).
  void log_micro_batching(const std::vector<components::Metric>& trainer_metrics);
  void fail(const std::string& reason);
  // Writes the rollout's record and keeps the worst and best training rollouts for the report;
  // then drops its transcript (the buffer needs only the tokens).
  void record_rollout(rollout::Trajectory& t, const json& task, bool validation, int64_t step);
  bool stopping() const { return stop_.load() || (options_.interrupted && options_.interrupted->load()); }

  const RunConfig& config_;
  const RunOptions& options_;
  std::filesystem::path out_;
  RunSummary summary_;
  plugin::HostServices host_{
      options_.interrupted};  // plugins see the interrupt and every fail() as cancellation
  PluginMetrics plugin_metrics_;
  std::unique_ptr<RunObserver> observer_;  // before the components: it sees their last calls too
  std::unique_ptr<mllog::Logger> log_;
  std::unique_ptr<ComponentPlacement> local_;  // the components, when they run in this process
  ComponentPlacement* placement_ = nullptr;    // local_, or RunOptions::placement
  Dataset train_, validation_;
  std::unique_ptr<rl::RolloutScheduler> scheduler_;
  std::unique_ptr<rl::GroupBuffer> buffer_;
  std::ofstream metrics_;
  std::thread feeder_, progress_thread_;
  InFlightRequests in_flight_;
  RunTotals totals_;
  std::atomic<bool> stop_{false}, cancel_flag_{false};
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<int64_t> step_{0}, samples_{0}, first_step_{0};
  std::atomic<uint64_t> version_{0};
  // What the progress line shows (written by the loop, read by the progress thread).
  std::atomic<const char*> phase_{"starting"};
  std::atomic<double> last_reward_{0};
  std::atomic<uint64_t> last_staleness_{0};
  std::mutex fail_mutex_;
  std::string failure_;
  std::unique_ptr<RolloutRecorder> rollouts_;
  std::mutex highlight_mutex_;
  std::optional<json> worst_rollout_, best_rollout_;
  std::vector<StepRecord> steps_;
  std::vector<EvalRecord> evals_;
  Clock::time_point run_start_;
  int64_t max_steps_ = 0;
  bool block_open_ = false;  // a block_start waits for its block_stop
  bool refit_fallback_said_ = false;
};

void BenchmarkRun::fail(const std::string& reason) {
  {
    std::lock_guard l(fail_mutex_);
    if (failure_.empty()) failure_ = reason;
  }
  stop_ = true;
  host_.cancel();  // a fatal error elsewhere stops the plugins' long calls too (mlpt.h is_cancelled)
  if (scheduler_) scheduler_->stop();
  if (buffer_) buffer_->notify();
}

void BenchmarkRun::record_rollout(rollout::Trajectory& t, const json& task, bool validation, int64_t step) {
  json record = rollout_json(t, task, validation, step);
  record["id"] = rollouts_->record(record);
  t.transcript = {};
  if (validation) return;
  std::lock_guard l(highlight_mutex_);
  const double reward = t.reward;
  if (!worst_rollout_ || reward < (*worst_rollout_)["reward"]["value"].get<double>()) worst_rollout_ = record;
  if (!best_rollout_ || reward > (*best_rollout_)["reward"]["value"].get<double>())
    best_rollout_ = std::move(record);
}

RunSummary BenchmarkRun::run() {
  out_ = config_.run.output_dir;
  const RunStart start = open_run_folder(out_, options_.resume);
  open(start);
  CrashGuard crash_guard(*log_, summary_.result_log);
  rollouts_ = std::make_unique<RolloutRecorder>(out_);
  bool run_started = false;
  try {
    initialise(start);
    if (start.resume_from) restore(*start.resume_from, crash_guard);
    const int64_t first_step = first_step_.load();
    step_ = first_step;
    const auto& b = config_.benchmark;
    scheduler_ = std::make_unique<rl::RolloutScheduler>(b.num_prompts_per_step,
                                                        static_cast<int32_t>(b.num_generations_per_prompt),
                                                        b.max_trajectory_age_steps, max_steps_);
    // A resumed run continues the data order where the checkpoint left it.
    scheduler_->skip_to(first_step * b.num_prompts_per_step);
    scheduler_->set_weight_version(static_cast<uint64_t>(first_step));
    buffer_ = std::make_unique<rl::GroupBuffer>(static_cast<int>(b.num_generations_per_prompt));

    log_->end(mllog::keys::kInitStop);
    log_->start(mllog::keys::kRunStart);
    run_started = true;
    crash_guard.run_started();
    run_start_ = Clock::now();
    start_rollouts();
    progress_thread_ = std::thread([this] { progress_loop(); });
    for (int64_t s = first_step; s < max_steps_ && !stopping(); ++s)
      if (!step(s, crash_guard) || summary_.converged) break;
  } catch (const Error& e) {
    // A call that stopped because of the interrupt is not a failure of its own.
    if (e.code() != MLPT_CANCELLED || !(options_.interrupted && options_.interrupted->load())) fail(e.what());
  } catch (const std::exception& e) {
    fail(std::string("internal error: ") + e.what());
  }
  return finish(run_started, crash_guard);
}

void BenchmarkRun::open(const RunStart& start) {
  observer_ = std::make_unique<RunObserver>(config_, out_);
  if (!options_.resume) write_run_marker(out_, config_.file);
  summary_.result_log = options_.resume ? resumed_result_log(out_) : out_ / "result.txt";
  summary_.metrics = out_ / "metrics.jsonl";
  summary_.report = out_ / "report.html";
  if (start.resume_from) {
    summary_.resumed_from_step = start.resume_from->step;
    summary_.time_already_spent_minutes = static_cast<double>(start.spent_before_ms) / 60000.0;
  }
  log_ =
      std::make_unique<mllog::Logger>(mllog::Logger::Options{summary_.result_log, false, nullptr, nullptr});
  // A resumed run's metrics are the checkpoint's steps, then its own: the steps an earlier attempt
  // ran past the checkpoint are redone, so its file is kept aside, not appended to.
  if (start.resume_from) keep_aside(summary_.metrics);
  metrics_.open(summary_.metrics, std::ios::trunc);
  if (start.resume_from)
    for (const auto& r : start.resume_from->steps) metrics_ << step_record_json(r).dump() << "\n";
  metrics_.flush();
}

void BenchmarkRun::initialise(const RunStart& start) {
  const auto& c = config_;
  // The init block needs the dataset sizes: read them first (cheap), then load the components.
  train_ = Dataset::load(c.dataset.train);
  validation_ = Dataset::load(c.dataset.validation);
  if (c.dataset.validation_tasks > 0 &&
      c.dataset.validation_tasks < static_cast<int64_t>(validation_.rows.size()))
    validation_.rows.resize(static_cast<size_t>(c.dataset.validation_tasks));
  max_steps_ = run_max_steps(c.benchmark, train_.rows.size());
  const auto resumed_from =
      start.resume_from ? std::optional<int64_t>(start.resume_from->step) : std::nullopt;
  mllog::write_init_block(
      *log_, run_hyperparameters(c, max_steps_, train_.rows.size(), validation_.rows.size(), resumed_from));
  if (start.resume_from) log_->point(mllog::keys::kTimeAlreadySpentMs, start.spent_before_ms);

  host_.set_metric_sink(
      [this](const std::string& name, double value) { plugin_metrics_.record(name, value); });
  if (options_.placement) {
    placement_ = options_.placement;
  } else {
    local_ = std::make_unique<LocalPlacement>(c, host_, &cancel_flag_, options_.after_refit);
    placement_ = local_.get();
  }
}

void BenchmarkRun::restore(const CheckpointState& state, CrashGuard& crash_guard) {
  first_step_ = state.step;
  // The engines get the checkpoint's weights the way every refit goes (a first refit is full).
  version_ = placement_->load_state(state.trainer_dir.string());
  placement_->deliver_weights(version_.load());
  samples_ = state.samples;
  crash_guard.samples(state.samples);
  steps_ = state.steps;
  evals_ = state.evals;
  if (!steps_.empty())
    last_reward_ = steps_.back().reward_mean, last_staleness_ = steps_.back().max_staleness;
}

bool BenchmarkRun::step(int64_t step, CrashGuard& crash_guard) {
  const auto& b = config_.benchmark;
  const int64_t samples = (step + 1) * b.global_batch_size;
  const bool evaluates = samples >= b.first_eval_samples;
  // Blocks as the reference logs them: one from run_start to the first evaluation, then one per
  // evaluation period.
  if (!block_open_)
    log_->start(mllog::keys::kBlockStart,
                {{std::string(mllog::keys::kMetaSamplesCount), step * b.global_batch_size}});
  block_open_ = true;

  auto wait_started = Clock::now();
  double span_at = observer_->now();
  phase_ = "waiting for rollouts";
  auto groups =
      buffer_->take(step * b.num_prompts_per_step, b.num_prompts_per_step, [this] { return stopping(); });
  if (groups.empty()) return false;
  const double wait_s = seconds_since(wait_started);
  observer_->loop_span("waiting for rollouts", span_at, {{"step", step + 1}});

  const auto model = placement_->model_info();
  rl::TrainBatch batch(groups, rules::kAdvantageEpsilon, version_.load(), placement_->record_routed_experts(),
                       model.num_moe_layers, model.experts_per_token);
  if (batch.statistics().max_staleness > static_cast<uint64_t>(b.max_trajectory_age_steps))
    throw Error(MLPT_INTERNAL, "staleness " + std::to_string(batch.statistics().max_staleness) +
                                   " exceeds max_trajectory_age_steps");
  auto train_started = Clock::now();
  uint64_t new_version = 0;
  phase_ = "training";
  span_at = observer_->now();
  auto trainer_metrics = placement_->train_step(*batch.abi(), &new_version);
  const double train_s = seconds_since(train_started);
  observer_->loop_span("train step", span_at, {{"step", step + 1}});
  totals_.add_time(&RunTotals::training_s, train_s);

  auto transfer_started = Clock::now();
  phase_ = "weight transfer";
  span_at = observer_->now();
  const refit::RefitStats refit_stats = update_weights(new_version, evaluates);
  const double transfer_s = seconds_since(transfer_started);
  observer_->loop_span("refit", span_at, {{"version", new_version}, {"bytes", refit_stats.bytes}});
  step_ = step + 1;
  samples_ = samples;
  crash_guard.samples(samples);
  if (step == first_step_.load()) log_micro_batching(trainer_metrics);
  if (evaluates) {
    log_->end(mllog::keys::kBlockStop, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
    block_open_ = false;
  }

  StepRecord r = make_step_record(step + 1, samples, batch.statistics(), groups, trainer_metrics, wait_s,
                                  train_s, transfer_s, seconds_since(run_start_));
  r.refit = refit_stats;
  r.plugins = plugin_metrics_.take();
  r.lost_rollout_workers = static_cast<int64_t>(placement_->lost_workers().size());
  steps_.push_back(r);
  last_reward_ = r.reward_mean, last_staleness_ = r.max_staleness;
  if (summary_.steps == 0) summary_.first_step_reward = r.reward_mean;
  summary_.last_step_reward = r.reward_mean;
  summary_.steps = step + 1 - first_step_.load();

  if (evaluates) {
    phase_ = "validation";
    span_at = observer_->now();
    auto m = validate(samples);
    observer_->loop_span("evaluation", span_at, {{"samples", samples}});
    if (m) {
      observer_->evaluated(step + 1, evals_.back());
      r.pass_at_k = m->pass_at_k, r.pass_at_1 = m->pass_at_1, r.pass_hat_k = m->pass_hat_k,
      r.evaluated = true;
      steps_.back() = r;
      summary_.best_pass_at_k = std::max(summary_.best_pass_at_k, m->pass_at_k);
      if (m->pass_at_k >= b.target_accuracy) summary_.converged = true;  // the reference's target test
    }
  }
  metrics_ << step_record_json(r).dump() << "\n" << std::flush;
  observer_->rollouts_in_flight(placement_->in_flight_by_worker());
  observer_->step_finished(r, max_steps_, placement_->in_flight());
  const int64_t every = config_.run.checkpoint_every_steps;
  if (every > 0 && (step + 1) % every == 0 && placement_->can_save_state())
    save_checkpoint_after(step + 1, samples, crash_guard);
  return true;
}

void BenchmarkRun::save_checkpoint_after(int64_t step, int64_t samples, CrashGuard& crash_guard) {
  const auto dir = out_ / "checkpoints";
  save_checkpoint(
      dir, step, samples, [this](const std::filesystem::path& d) { placement_->save_state(d.string()); },
      steps_, evals_);
  crash_guard.checkpoint_saved(dir / ("step_" + std::to_string(step)), step);
}

RunSummary BenchmarkRun::finish(bool run_started, CrashGuard& crash_guard) {
  if (block_open_)
    log_->end(mllog::keys::kBlockStop, {{std::string(mllog::keys::kMetaSamplesCount), samples_.load()}});
  stop_ = true;
  if (scheduler_) stop_rollouts();
  if (progress_thread_.joinable()) progress_thread_.join();
  RunSummary& summary = summary_;
  summary.samples = samples_.load();
  if (options_.interrupted && options_.interrupted->load() && failure_.empty()) failure_ = "interrupted";
  summary.aborted = !summary.converged;
  summary.abort_reason = !failure_.empty() ? failure_ : summary.converged ? "" : kNotConvergedReason;
  observer_->run_ended(failure_);
  if (!run_started) log_->start(mllog::keys::kRunStart);  // run_stop needs its run_start to be readable
  log_->end(mllog::keys::kRunStop,
            {{std::string(mllog::keys::kMetaSamplesCount), summary.samples},
             {std::string(mllog::keys::kMetaStatus),
              std::string(summary.converged ? mllog::keys::kStatusSuccess : mllog::keys::kStatusAborted)}});
  crash_guard.log_closed();
  // A resumed run's time to train counts the earlier attempts too (docs/benchmark.md §1.2).
  summary.time_to_train_minutes =
      (run_started ? seconds_since(run_start_) / 60.0 : 0.0) + summary.time_already_spent_minutes;

  ReportInputs report{config_.run.name,
                      steps_,
                      evals_,
                      {},
                      summary.converged,
                      summary.abort_reason,
                      summary.time_to_train_minutes};
  {
    std::lock_guard l(totals_.m);
    report.time_split = summary.time_split = totals_.time_split();
    report.rollouts = totals_.rollouts;
    report.failed_rollouts = totals_.failed_rollouts;
    summary.rollouts = totals_.finished_rollouts;
    summary.failed_rollouts = totals_.failed_rollouts;
    report.generated_tokens = totals_.generated_tokens;
  }
  if (placement_) summary.lost_workers = report.lost_workers = placement_->lost_workers();
  report.trace = observer_->trace(), report.tensorboard = observer_->tensorboard();
  if (rollouts_) rollouts_->flush();
  {
    std::lock_guard l(highlight_mutex_);
    if (worst_rollout_) report.highlighted_rollouts.push_back({"worst training rollout", *worst_rollout_});
    if (best_rollout_) report.highlighted_rollouts.push_back({"best training rollout", *best_rollout_});
  }
  write_report(summary.report, report);
  return summary;
}

rollout::Trajectory BenchmarkRun::back_fill(const rollout::EpisodeRequest& request, const std::string& reason,
                                            bool validation, double started_at) {
  observer_->rollout_back_filled(request, validation, started_at, reason);
  int64_t failed, finished;
  {
    std::lock_guard l(totals_.m);
    failed = ++totals_.failed_rollouts;
    finished = ++totals_.finished_rollouts;
  }
  std::fprintf(stderr, "[mlpt] rollout failed (back-filled with reward 0): %s\n", reason.c_str());
  const double rate = config_.benchmark.max_rollout_failure_rate;
  if (static_cast<double>(failed) > std::ceil(rate * static_cast<double>(finished)))
    fail(std::to_string(failed) + " of " + std::to_string(finished) +
         " rollouts failed, more than max_rollout_failure_rate = " + std::to_string(rate) +
         "; last: " + reason);
  return rollout::failed_rollout(request, placement_->end_of_turn_token(), version_.load(), reason);
}

// Hands the scheduler's jobs to the placement's episodes (blocking while they are full) until the
// scheduler stops; episodes report back on the placement's threads.
void BenchmarkRun::feed_rollouts() {
  while (auto job = scheduler_->next()) {
    if (cancel_flag_.load()) {  // stopping: start nothing more
      scheduler_->done();
      break;
    }
    const size_t row = static_cast<size_t>(job->prompt_index) % train_.rows.size();
    auto request = episode_request(config_, train_, row, job->prompt_index, job->sample_index, false,
                                   next_request_id_++);
    const uint64_t id = request.id;
    in_flight_.add(id);
    rollout::EpisodeRequest kept = request;  // what a back-fill is made from
    const double started_at = observer_->now();
    try {
      placement_->start(std::move(request), [this, job = *job, id, row, kept = std::move(kept), started_at](
                                                rollout::Trajectory&& t, std::exception_ptr error) {
        observer_->rollout_ended(t, false, error != nullptr);
        settle(
            error,
            "rollout of prompt " + std::to_string(job.prompt_index) + " sample " +
                std::to_string(job.sample_index),
            [&] {
              totals_.add(t);
              record_rollout(t, train_.rows[row], false,
                             job.prompt_index / config_.benchmark.num_prompts_per_step + 1);
              buffer_->add(std::move(t));
            },
            [&](const std::string& reason) { buffer_->add(back_fill(kept, reason, false, started_at)); });
        in_flight_.remove(id);
        scheduler_->done();
      });
    } catch (const Error& e) {  // the placement is failing (its ranks) or stopping
      in_flight_.remove(id);
      scheduler_->done();
      if (!stopping()) fail(e.what());
      break;
    }
  }
}

// Runs `on_success` for an episode that ended without error. An infrastructure error of the episode,
// or one thrown by `on_success`, goes to `on_failure` with a message naming the rollout (the run
// back-fills it); a cancellation while stopping is neither.
void BenchmarkRun::settle(std::exception_ptr error, const std::string& what,
                          const std::function<void()>& on_success,
                          const std::function<void(const std::string&)>& on_failure) {
  try {
    if (error) std::rethrow_exception(error);
    on_success();
  } catch (const Error& e) {
    if (e.code() != MLPT_CANCELLED || !stopping()) on_failure(what + ": " + e.what());
  } catch (const std::exception& e) {
    on_failure(what + ": " + e.what());
  }
}

void BenchmarkRun::start_rollouts() {
  feeder_ = std::thread([this] { feed_rollouts(); });
}

void BenchmarkRun::stop_rollouts() {
  cancel_flag_ = true;
  host_.cancel();  // sandbox commands and generations still running stop now
  if (scheduler_) scheduler_->stop();
  try {
    placement_->cancel(in_flight_.snapshot());
  } catch (const Error&) {  // the ranks are gone already
  }
  if (feeder_.joinable()) feeder_.join();
  placement_->wait_idle();
}

// Pause new generation, hand the trainer's weights to the engines, resume. A sparse refit encodes
// what changed before pausing, so generation goes on while it compares.
refit::RefitStats BenchmarkRun::update_weights(uint64_t version, bool then_validate) {
  auto started = Clock::now();
  placement_->prepare_weights(version);
  scheduler_->pause();
  // Drain: every episode in flight finishes all its turns on the old weights (unless the run
  // updates in flight, between the turns of running episodes).
  const double drain_at = observer_->now();
  if (!config_.benchmark.in_flight_weight_updates) scheduler_->wait_idle([this] { return stopping(); });
  observer_->loop_span("drain rollouts", drain_at);
  const refit::RefitStats stats = placement_->deliver_weights(version);
  if (!stats.fallback.empty() && !refit_fallback_said_) {
    refit_fallback_said_ = true;  // every metrics row carries it; the progress line says it once
    (options_.progress ? options_.progress : [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
    })("[mlpt] " + stats.fallback);
  }
  version_ = version;
  scheduler_->set_weight_version(version);
  if (!then_validate) scheduler_->resume();
  totals_.add_time(&RunTotals::weight_transfer_s, seconds_since(started));
  return stats;
}

std::optional<eval::PassAtK> BenchmarkRun::validate(int64_t samples) {
  auto started = Clock::now();
  const int64_t k = config_.benchmark.eval_k;
  log_->start(mllog::keys::kEvalStart, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
  // Pause and drain training rollouts; validation runs on an idle engine.
  scheduler_->pause();
  scheduler_->wait_idle([this] { return stopping(); });
  const size_t tasks = validation_.rows.size();
  std::vector<std::vector<double>> rewards(tasks, std::vector<double>(static_cast<size_t>(k), 0.0));
  std::atomic<int64_t> failed{0};
  // On the training rollouts' places (idle now); its episodes write disjoint cells of `rewards`.
  for (int64_t j = 0; j < static_cast<int64_t>(tasks) * k && !stopping(); ++j) {
    const size_t task = static_cast<size_t>(j / k), sample = static_cast<size_t>(j % k);
    auto request = episode_request(config_, validation_, task, -1 - static_cast<int64_t>(task),
                                   static_cast<int32_t>(sample), true, next_request_id_++);
    const uint64_t id = request.id;
    in_flight_.add(id);
    rollout::EpisodeRequest kept = request;
    const double started_at = observer_->now();
    placement_->start(std::move(request), [this, &rewards, &failed, task, sample, id, samples, started_at,
                                           kept = std::move(kept)](rollout::Trajectory&& t,
                                                                   std::exception_ptr error) {
      observer_->rollout_ended(t, true, error != nullptr);
      settle(
          error, "validation rollout of task " + std::to_string(task) + " sample " + std::to_string(sample),
          [&] {
            rewards[task][sample] = t.reward;
            totals_.add_validation();
            record_rollout(t, validation_.rows[task], true, samples / config_.benchmark.global_batch_size);
          },
          [&](const std::string& reason) {
            back_fill(kept, reason, true, started_at), ++failed;
          });  // reward stays 0
      in_flight_.remove(id);
    });
  }
  placement_->wait_idle();
  if (stopping()) return std::nullopt;
  auto m = eval::pass_at_k(rewards);
  log_->point(mllog::keys::kEvalAccuracy, m.pass_at_k,
              {{std::string(mllog::keys::kMetaSamplesCount), samples}});
  log_->end(mllog::keys::kEvalStop, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
  scheduler_->resume();
  const double s = seconds_since(started);
  totals_.add_time(&RunTotals::validation_s, s);
  evals_.push_back(EvalRecord{samples, m.pass_at_k, m.pass_at_1, m.pass_hat_k, s, failed.load()});
  return m;
}

void BenchmarkRun::log_micro_batching(const std::vector<components::Metric>& trainer_metrics) {
  int64_t micro_batches = 1;
  for (const auto& m : trainer_metrics)
    if (m.name == "micro_batches" && m.value >= 1)
      micro_batches = static_cast<int64_t>(std::llround(m.value));
  const int64_t gbs = config_.benchmark.global_batch_size;
  log_->point(mllog::keys::kGradientAccumulationSteps, micro_batches);
  log_->point(mllog::keys::kMicroBatchSize, (gbs + micro_batches - 1) / micro_batches);  // sequences, at most
}

void BenchmarkRun::progress_loop() {
  auto say = options_.progress ? options_.progress
                               : [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto last = Clock::now();
  int64_t last_tokens = 0;
  while (!stop_.load()) {
    // /metrics' rollouts in flight per worker follow the run every 100 ms, the progress line less often.
    for (int i = 0; i < static_cast<int>(options_.progress_interval_s * 10) && !stop_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      observer_->rollouts_in_flight(placement_->in_flight_by_worker());
    }
    if (stop_.load()) break;
    int64_t tokens, rollouts;
    double sandbox_s;
    {
      std::lock_guard l(totals_.m);
      tokens = totals_.generated_tokens, rollouts = totals_.rollouts, sandbox_s = totals_.environment_s;
    }
    const double dt = seconds_since(last);
    last = Clock::now();
    const double tps = (tokens - last_tokens) / std::max(dt, 1e-9);
    last_tokens = tokens;
    const double reward = last_reward_.load();
    const uint64_t staleness = last_staleness_.load();
    const double elapsed = seconds_since(run_start_);
    const int64_t step = step_.load();
    std::string eta = "?";
    const int64_t done = step - first_step_.load();  // steps this process ran (a resumed run starts later)
    if (done > 0 && max_steps_ > 0)
      eta = std::to_string(static_cast<int64_t>(elapsed / done * (max_steps_ - step))) + "s";
    char line[512];
    std::snprintf(line, sizeof line,
                  "[mlpt] step %lld/%lld  samples %lld  in flight %lld  rollouts %lld  %.0f tok/s  sandbox "
                  "%.1fs  reward %.3f  staleness %llu  ETA %s  (%s)",
                  static_cast<long long>(step), static_cast<long long>(max_steps_),
                  static_cast<long long>(samples_.load()), static_cast<long long>(scheduler_->in_flight()),
                  static_cast<long long>(rollouts), tps, sandbox_s, reward,
                  static_cast<unsigned long long>(staleness), eta.c_str(), phase_.load());
    say(line);
  }
}

}  // namespace

RunSummary run_benchmark(const RunConfig& config, const RunOptions& options) {
  BenchmarkRun run(config, options);
  return run.run();
}

}  // namespace mlpt::run
