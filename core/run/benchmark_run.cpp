#include "core/run/benchmark_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <unistd.h>

#include "core/components/instances.hpp"
#include "core/eval/pass_at_k.hpp"
#include "core/mllog/init_block.hpp"
#include "core/mllog/keys.hpp"
#include "core/plugin/component_set.hpp"
#include "core/rl/group_buffer.hpp"
#include "core/rl/rollout_scheduler.hpp"
#include "core/rl/train_batch.hpp"
#include "core/rollout/episode.hpp"
#include "core/rollout/rollout_pool.hpp"
#include "core/rules/closed_division.hpp"
#include "core/run/checkpoint.hpp"
#include "core/run/crash_guard.hpp"
#include "core/run/dataset.hpp"
#include "core/run/plugin_metrics.hpp"
#include "core/run/report.hpp"
#include "core/run/rollout_components.hpp"
#include "core/run/rollout_record.hpp"
#include "core/run/run_dir.hpp"
#include "core/run/run_observer.hpp"
#include "core/run/step_record.hpp"
#include "core/run/trainer_settings.hpp"
#include "core/run/weight_refit.hpp"

namespace mlpt::run {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A per-rollout sampling seed that depends only on the run seed and the rollout's place in the
// data order, so a resumed run samples the same way.
uint64_t rollout_seed(int64_t run_seed, int64_t prompt_index, int32_t sample, bool validation) {
  uint64_t x = static_cast<uint64_t>(run_seed) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(prompt_index) * 0xBF58476D1CE4E5B9ull ^
               static_cast<uint64_t>(sample) * 0x94D049BB133111EBull ^ (validation ? 0xD6E8FEB86659FD93ull : 0);
  x ^= x >> 31;
  x *= 0x7FB5D7ED6A4B3C29ull;
  return x ^ (x >> 29);
}

// Tracks the engine requests in flight so an interrupt can cancel them.
class InFlight {
 public:
  void add(uint64_t id) { std::lock_guard l(m_); ids_.insert(id); }
  void remove(uint64_t id) { std::lock_guard l(m_); ids_.erase(id); }
  std::vector<uint64_t> snapshot() { std::lock_guard l(m_); return {ids_.begin(), ids_.end()}; }

 private:
  std::mutex m_;
  std::set<uint64_t> ids_;
};

// Time split and throughput, accumulated by workers and the trainer thread.
struct Totals {
  std::mutex m;
  double generation_s = 0, environment_s = 0, reward_s = 0, core_s = 0;
  double training_s = 0, weight_transfer_s = 0, validation_s = 0;
  int64_t generated_tokens = 0, rollouts = 0;
  // Every rollout that ended (training and validation), and those that failed for an infrastructure
  // reason and were back-filled: the failure rate's two counts.
  int64_t finished_rollouts = 0, failed_rollouts = 0;
  void add(const rollout::Trajectory& t) {
    std::lock_guard l(m);
    generation_s += t.generation_s, environment_s += t.environment_s, reward_s += t.reward_s, core_s += t.core_s;
    generated_tokens += t.generated_tokens();
    ++rollouts, ++finished_rollouts;
  }
  void add_validation() { std::lock_guard l(m); ++finished_rollouts; }
};

class BenchmarkRun {
 public:
  BenchmarkRun(const RunConfig& c, const RunOptions& o) : config_(c), options_(o), remote_(o.remote) {}
  RunSummary run();

 private:
  void initialise();
  void start_workers();
  void stop_workers();
  void feed_rollouts();
  void settle(std::exception_ptr error, const std::string& what, const std::function<void()>& on_success,
              const std::function<void(const std::string&)>& on_failure);
  rollout::EpisodeRequest episode_request(const json& row, size_t row_index, const Dataset& data, int64_t prompt_index,
                                          int32_t sample, bool validation);
  // Moves the trainer's weights of `version` to the engine; returns what was moved. Training
  // rollouts start again afterwards unless `then_validate` (validation pauses them anyway, and
  // episodes started in between would only delay it).
  refit::RefitStats update_weights(uint64_t version, bool then_validate);
  // A rollout that failed for an infrastructure reason: counted, and the run fails once failures
  // pass max_rollout_failure_rate. Returns the zero-reward trajectory that stands in for it.
  rollout::Trajectory back_fill(const rollout::EpisodeRequest& request, const std::string& reason);
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
  plugin::HostServices host_{options_.interrupted};  // plugins see the interrupt and every fail() as cancellation
  PluginMetrics plugin_metrics_;
  std::unique_ptr<RunObserver> observer_;  // before the components: it sees their last calls too
  std::unique_ptr<plugin::ComponentSet> set_;
  std::unique_ptr<mllog::Logger> log_;
  // In one process the loop owns every component; the coordinator of a distributed run none.
  std::unique_ptr<components::Trainer> trainer_;
  std::unique_ptr<RolloutComponents> rollout_side_;
  std::unique_ptr<components::Transport> sender_;
  std::unique_ptr<WeightRefit> refit_;
  RemoteRanks* remote_ = nullptr;
  Dataset train_, validation_;
  rollout::EpisodeEnvironment env_{};
  std::unique_ptr<rl::RolloutScheduler> scheduler_;
  std::unique_ptr<rl::GroupBuffer> buffer_;
  std::unique_ptr<rollout::RolloutPool> rollout_pool_;
  rollout::EpisodeRunner* runner_ = nullptr;  // rollout_pool_, or the remote rollout workers
  std::thread feeder_, progress_thread_;
  InFlight in_flight_;
  Totals totals_;
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
  if (!best_rollout_ || reward > (*best_rollout_)["reward"]["value"].get<double>()) best_rollout_ = std::move(record);
}

void BenchmarkRun::initialise() {
  const auto& c = config_;
  if (remote_) {  // the components live on the other ranks; a back-fill still ends its turn
    env_.stop_tokens = {end_of_turn_token(text::Tokenizer::load(c.dataset.tokenizer), c.dataset.tokenizer)};
    env_.record_routed_experts = remote_->record_routed_experts();
    return;
  }
  host_.set_metric_sink([this](const std::string& name, double value) { plugin_metrics_.record(name, value); });
  set_ = std::make_unique<plugin::ComponentSet>(c.components, host_);
  // A settings error names the setting's file, line and key in the config.
  trainer_ = set_->create(MLPT_COMPONENT_TRAINER, [&] {
    return std::make_unique<components::Trainer>(set_->component(MLPT_COMPONENT_TRAINER), trainer_settings(c, set_->settings(MLPT_COMPONENT_TRAINER)));
  });
  const std::string group = "mlpt-run-" + std::to_string(::getpid());
  rollout_side_ = std::make_unique<RolloutComponents>(c, *set_, group, &cancel_flag_);
  sender_ = set_->make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_SENDER, group);
  refit_ = std::make_unique<WeightRefit>(c.run, *trainer_, rollout_side_->engine(), *sender_, rollout_side_->receiver(),
                                         options_.after_refit);
  env_ = rollout_side_->environment();
}

rollout::EpisodeRequest BenchmarkRun::episode_request(const json& row, size_t row_index, const Dataset& data,
                                                      int64_t prompt_index, int32_t sample, bool validation) {
  const auto& b = config_.benchmark;
  rollout::EpisodeRequest r;
  r.task = &row;
  r.image = data.image(row_index, config_.dataset.images);
  r.prompt_index = prompt_index;
  r.sample_index = sample;
  r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE,
                                    static_cast<float>(validation ? b.validation_temperature : b.training_temperature),
                                    static_cast<float>(validation ? b.validation_top_p : b.training_top_p), 0,
                                    rollout_seed(config_.run.seed, prompt_index, sample, validation)};
  r.id = next_request_id_++;
  r.limits = rollout::EpisodeLimits{b.max_turns,       b.max_sequence_length,
                                    b.max_new_tokens_per_turn, b.agent_timeout_s,
                                    b.command_timeout_s, validation ? b.validation_test_timeout_s : b.test_timeout_s};
  return r;
}

rollout::Trajectory BenchmarkRun::back_fill(const rollout::EpisodeRequest& request, const std::string& reason) {
  int64_t failed, finished;
  {
    std::lock_guard l(totals_.m);
    failed = ++totals_.failed_rollouts;
    finished = ++totals_.finished_rollouts;
  }
  std::fprintf(stderr, "[mlpt] rollout failed (back-filled with reward 0): %s\n", reason.c_str());
  const double rate = config_.benchmark.max_rollout_failure_rate;
  if (static_cast<double>(failed) > std::ceil(rate * static_cast<double>(finished)))
    fail(std::to_string(failed) + " of " + std::to_string(finished) + " rollouts failed, more than max_rollout_failure_rate = " +
         std::to_string(rate) + "; last: " + reason);
  return rollout::failed_rollout(request, env_.stop_tokens.front(), version_.load(), reason);
}

// Hands the scheduler's jobs to the rollout pool (blocking while it is full) until the scheduler
// stops; episodes report back on pool threads.
void BenchmarkRun::feed_rollouts() {
  while (auto job = scheduler_->next()) {
    if (cancel_flag_.load()) {  // stopping: start nothing more
      scheduler_->done();
      break;
    }
    const size_t row = static_cast<size_t>(job->prompt_index) % train_.rows.size();
    auto request = episode_request(train_.rows[row], row, train_, job->prompt_index, job->sample_index, false);
    const uint64_t id = request.id;
    in_flight_.add(id);
    rollout::EpisodeRequest kept = request;  // what a back-fill is made from
    try {
      runner_->start(std::move(request), [this, job = *job, id, row, kept = std::move(kept)](rollout::Trajectory&& t, std::exception_ptr error) {
        observer_->rollout_ended(t, false, error != nullptr);
        settle(
            error, "rollout of prompt " + std::to_string(job.prompt_index) + " sample " + std::to_string(job.sample_index),
            [&] {
              totals_.add(t);
              record_rollout(t, train_.rows[row], false, job.prompt_index / config_.benchmark.num_prompts_per_step + 1);
              buffer_->add(std::move(t));
            },
            [&](const std::string& reason) { buffer_->add(back_fill(kept, reason)); });
        in_flight_.remove(id);
        scheduler_->done();
      });
    } catch (const Error& e) {  // the remote workers are failing or stopping
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
void BenchmarkRun::settle(std::exception_ptr error, const std::string& what, const std::function<void()>& on_success,
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

void BenchmarkRun::start_workers() {
  const auto threads = static_cast<int>(std::min(config_.run.rollout_threads, config_.run.rollout_workers));
  if (remote_) {
    runner_ = remote_;
  } else {
    rollout_pool_ = std::make_unique<rollout::RolloutPool>(env_, threads, config_.run.rollout_workers);
    runner_ = rollout_pool_.get();
  }
  feeder_ = std::thread([this] { feed_rollouts(); });
}

void BenchmarkRun::stop_workers() {
  cancel_flag_ = true;
  host_.cancel();  // sandbox commands and generations still running stop now
  if (scheduler_) scheduler_->stop();
  if (remote_) {
    try {
      remote_->cancel(in_flight_.snapshot());
    } catch (const Error&) {
    }
  } else {
    for (auto id : in_flight_.snapshot()) {
      try {
        rollout_side_->engine().cancel(id);
      } catch (const Error&) {
      }
    }
    try {
      rollout_side_->engine().resume();  // requests held by a paused engine must see the cancellation
    } catch (const Error&) {
    }
  }
  if (feeder_.joinable()) feeder_.join();
  if (remote_) remote_->wait_idle();
  rollout_pool_.reset();  // waits for the episodes in flight
}

// Pause new generation, hand the trainer's weights through the transport, load them, resume. A
// sparse refit encodes what changed before pausing, so generation goes on while it compares.
refit::RefitStats BenchmarkRun::update_weights(uint64_t version, bool then_validate) {
  auto started = Clock::now();
  if (refit_) refit_->prepare(version);
  scheduler_->pause();
  // Drain: every episode in flight finishes all its turns on the old weights (unless the run
  // updates in flight, between the turns of running episodes).
  const double drain_at = observer_->now();
  if (!config_.benchmark.in_flight_weight_updates) scheduler_->wait_idle([this] { return stopping(); });
  observer_->loop_span("drain rollouts", drain_at);
  refit::RefitStats stats{};
  if (remote_) {
    stats = remote_->publish(version);  // trainer rank 0 -> transport -> every rollout worker's engine
  } else {
    rollout_side_->engine().pause();
    stats = refit_->deliver();
    rollout_side_->engine().resume();
  }
  version_ = version;
  scheduler_->set_weight_version(version);
  if (!then_validate) scheduler_->resume();
  std::lock_guard l(totals_.m);
  totals_.weight_transfer_s += seconds_since(started);
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
  // On the training rollouts' pool (idle now); its episodes write disjoint cells of `rewards`.
  for (int64_t j = 0; j < static_cast<int64_t>(tasks) * k && !stopping(); ++j) {
    const size_t task = static_cast<size_t>(j / k), sample = static_cast<size_t>(j % k);
    auto request = episode_request(validation_.rows[task], task, validation_, -1 - static_cast<int64_t>(task),
                                   static_cast<int32_t>(sample), true);
    const uint64_t id = request.id;
    in_flight_.add(id);
    rollout::EpisodeRequest kept = request;
    runner_->start(std::move(request), [this, &rewards, &failed, task, sample, id, samples, kept = std::move(kept)](
                                           rollout::Trajectory&& t, std::exception_ptr error) {
      observer_->rollout_ended(t, true, error != nullptr);
      settle(
          error, "validation rollout of task " + std::to_string(task) + " sample " + std::to_string(sample),
          [&] {
            rewards[task][sample] = t.reward;
            totals_.add_validation();
            record_rollout(t, validation_.rows[task], true, samples / config_.benchmark.global_batch_size);
          },
          [&](const std::string& reason) { back_fill(kept, reason), ++failed; });  // its reward stays 0
      in_flight_.remove(id);
    });
  }
  runner_->wait_idle();
  if (stopping()) return std::nullopt;
  auto m = eval::pass_at_k(rewards);
  log_->point(mllog::keys::kEvalAccuracy, m.pass_at_k, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
  log_->end(mllog::keys::kEvalStop, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
  scheduler_->resume();
  double s = seconds_since(started);
  {
    std::lock_guard l(totals_.m);
    totals_.validation_s += s;
  }
  evals_.push_back(EvalRecord{samples, m.pass_at_k, m.pass_at_1, m.pass_hat_k, s, failed.load()});
  return m;
}

void BenchmarkRun::log_micro_batching(const std::vector<components::Metric>& trainer_metrics) {
  int64_t micro_batches = 1;
  for (const auto& m : trainer_metrics)
    if (m.name == "micro_batches" && m.value >= 1) micro_batches = static_cast<int64_t>(std::llround(m.value));
  const int64_t gbs = config_.benchmark.global_batch_size;
  log_->point(mllog::keys::kGradientAccumulationSteps, micro_batches);
  log_->point(mllog::keys::kMicroBatchSize, (gbs + micro_batches - 1) / micro_batches);  // sequences, at most
}

void BenchmarkRun::progress_loop() {
  auto say = options_.progress ? options_.progress : [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto last = Clock::now();
  int64_t last_tokens = 0;
  while (!stop_.load()) {
    for (int i = 0; i < static_cast<int>(options_.progress_interval_s * 10) && !stop_.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
    if (done > 0 && max_steps_ > 0) eta = std::to_string(static_cast<int64_t>(elapsed / done * (max_steps_ - step))) + "s";
    char line[512];
    std::snprintf(line, sizeof line,
                  "[mlpt] step %lld/%lld  samples %lld  in flight %lld  rollouts %lld  %.0f tok/s  sandbox %.1fs  reward %.3f  staleness %llu  ETA %s  (%s)",
                  static_cast<long long>(step), static_cast<long long>(max_steps_), static_cast<long long>(samples_.load()),
                  static_cast<long long>(scheduler_->in_flight()), static_cast<long long>(rollouts), tps, sandbox_s, reward,
                  static_cast<unsigned long long>(staleness), eta.c_str(), phase_.load());
    say(line);
  }
}

RunSummary BenchmarkRun::run() {
  const auto& c = config_;
  const auto& b = c.benchmark;
  out_ = c.run.output_dir;
  // Nothing is written before these checks: a folder holding another run is never touched, and a
  // resume needs a checkpoint to start from.
  std::optional<CheckpointState> resume_from;
  int64_t spent_before_ms = 0;
  if (options_.resume) {
    resume_from = latest_checkpoint(out_ / "checkpoints");
    if (!resume_from) throw Error(MLPT_NOT_FOUND, (out_ / "checkpoints").string() + ": no checkpoint to resume from");
    spent_before_ms = time_spent_before(out_);
  } else if (auto traces = run_traces(out_)) {
    throw Error(MLPT_ALREADY_EXISTS, out_.string() + " holds another run (" + *traces +
                                         "); a run never writes into it. Continue that run with `mlpt run --resume " +
                                         out_.string() + "`, pass --new-folder to write to the next free " +
                                         out_.filename().string() + "-N, or set [run] output_dir");
  }
  std::filesystem::create_directories(out_);
  observer_ = std::make_unique<RunObserver>(c, out_);
  if (!options_.resume) write_run_marker(out_, c.file);
  RunSummary summary;
  summary.result_log = options_.resume ? resumed_result_log(out_) : out_ / "result.txt";
  summary.metrics = out_ / "metrics.jsonl";
  summary.report = out_ / "report.html";
  if (resume_from) {
    summary.resumed_from_step = resume_from->step;
    summary.time_already_spent_minutes = static_cast<double>(spent_before_ms) / 60000.0;
  }

  log_ = std::make_unique<mllog::Logger>(mllog::Logger::Options{summary.result_log, false, nullptr, nullptr});
  mllog::RunHyperparameters hp = mllog::closed_division_run(b.global_batch_size, c.run.seed, 0, 0, 0, 0, c.run.org, c.run.platform);
  hp.division = c.run.division;
  hp.status = c.run.status;
  hp.max_sequence_length = b.max_sequence_length;
  hp.num_prompts_per_step = b.num_prompts_per_step;
  hp.num_generations_per_prompt = b.num_generations_per_prompt;
  hp.base_learning_rate = hp.end_learning_rate = b.learning_rate;
  hp.gradient_clip_norm = b.gradient_clip_norm;
  hp.train_temperature = b.training_temperature;
  hp.train_top_p = b.training_top_p;
  hp.validation_temperature = b.validation_temperature;
  hp.validation_top_p = b.validation_top_p;
  hp.target_accuracy = b.target_accuracy;
  hp.max_trajectory_age_steps = b.max_trajectory_age_steps;
  if (resume_from) hp.init_checkpoint_step = resume_from->step;
  CrashGuard crash_guard(*log_, summary.result_log);
  rollouts_ = std::make_unique<RolloutRecorder>(out_);
  {
    namespace k = mllog::keys;
    // The trainer's loss settings as declared, else the reference's (which the reference trainer
    // also defaults to).
    nlohmann::json loss = nlohmann::json::object();
    for (const auto& comp : c.components)
      if (comp.kind == MLPT_COMPONENT_TRAINER && comp.settings.contains("loss") && comp.settings["loss"].is_object())
        loss = comp.settings["loss"];
    hp.settings = {{std::string(k::kTisLowerBound), loss.value("tis_min", rules::kTisLowerBound)},
                   {std::string(k::kTisUpperBound), loss.value("tis_max", rules::kTisUpperBound)},
                   {std::string(k::kLogprobErrorThreshold), loss.value("logprob_error_max", rules::kLogprobErrorThreshold)},
                   {std::string(k::kForceOnPolicyRatio), !loss.value("ppo_clip", false)},
                   {std::string(k::kAgentMaxIterations), b.max_turns},
                   {std::string(k::kAgentTimeout), b.agent_timeout_s},
                   {std::string(k::kCommandTimeout), b.command_timeout_s},
                   {std::string(k::kTestTimeout), b.test_timeout_s},
                   {std::string(k::kValidationTestTimeout), b.validation_test_timeout_s},
                   {std::string(k::kInFlightWeightUpdates), b.in_flight_weight_updates},
                   {std::string(k::kMaxRolloutFailureRate), b.max_rollout_failure_rate}};
  }

  // A resumed run's metrics are the checkpoint's steps, then its own: the steps an earlier attempt
  // ran past the checkpoint are redone, so its file is kept aside, not appended to.
  if (resume_from) keep_aside(summary.metrics);
  std::ofstream metrics(summary.metrics, std::ios::trunc);
  if (resume_from)
    for (const auto& r : resume_from->steps) metrics << step_record_json(r).dump() << "\n";
  metrics.flush();
  bool run_started = false;
  try {
    // The init block needs the dataset sizes: read them first (cheap), then load the components.
    train_ = Dataset::load(c.dataset.train);
    validation_ = Dataset::load(c.dataset.validation);
    if (c.dataset.validation_tasks > 0 && c.dataset.validation_tasks < static_cast<int64_t>(validation_.rows.size()))
      validation_.rows.resize(static_cast<size_t>(c.dataset.validation_tasks));
    // Without max_steps: the reference's for the table's batch sizes (30/20/10), else one pass over
    // the training data in its fixed order.
    max_steps_ = b.max_steps > 0                                    ? b.max_steps
                 : rules::reference_max_steps(b.global_batch_size) > 0 ? rules::reference_max_steps(b.global_batch_size)
                     : std::max<int64_t>(1, static_cast<int64_t>(train_.rows.size()) / b.num_prompts_per_step);
    hp.max_steps = max_steps_;
    // A constant schedule over the whole run.
    hp.settings.insert(hp.settings.begin(), std::pair<std::string, nlohmann::json>(mllog::keys::kOptLearningRateDecaySteps, max_steps_));
    // As the reference logs it: every training row, num_generations_per_prompt (16) samples each.
    hp.train_samples = static_cast<int64_t>(train_.rows.size()) * b.num_generations_per_prompt;
    hp.eval_samples = static_cast<int64_t>(validation_.rows.size());
    mllog::write_init_block(*log_, hp);
    if (resume_from) log_->point(mllog::keys::kTimeAlreadySpentMs, spent_before_ms);
    initialise();

    int64_t first_step = 0;
    if (resume_from) {
      const auto& state = resume_from;
      first_step = state->step;
      if (remote_) {
        version_ = remote_->load_state(state->trainer_dir.string());
        remote_->publish(version_.load());
      } else {
        trainer_->load_state(state->trainer_dir.string());
        // The engine gets the checkpoint's weights the way every refit goes (a first refit is full).
        const uint64_t resumed = trainer_->export_weights().version;
        refit_->prepare(resumed);
        refit_->deliver();
        version_ = resumed;
      }
      samples_ = state->samples;
      crash_guard.samples(state->samples);
      steps_ = state->steps;
      evals_ = state->evals;
      if (!steps_.empty()) last_reward_ = steps_.back().reward_mean, last_staleness_ = steps_.back().max_staleness;
    }
    step_ = first_step, first_step_ = first_step;
    scheduler_ = std::make_unique<rl::RolloutScheduler>(b.num_prompts_per_step, static_cast<int32_t>(b.num_generations_per_prompt),
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
    start_workers();
    progress_thread_ = std::thread([this] { progress_loop(); });

    // Blocks as the reference logs them: one from run_start to the first evaluation, then one per
    // evaluation period.
    for (int64_t step = first_step; step < max_steps_ && !stopping(); ++step) {
      const int64_t samples = (step + 1) * b.global_batch_size;
      if (!block_open_) log_->start(mllog::keys::kBlockStart, {{std::string(mllog::keys::kMetaSamplesCount), step * b.global_batch_size}});
      block_open_ = true;
      auto wait_started = Clock::now();
      double span_at = observer_->now();
      phase_ = "waiting for rollouts";
      auto groups = buffer_->take(step * b.num_prompts_per_step, b.num_prompts_per_step, [this] { return stopping(); });
      if (groups.empty()) break;
      const double wait_s = seconds_since(wait_started);
      observer_->loop_span("waiting for rollouts", span_at, {{"step", step + 1}});

      const auto model = remote_ ? remote_->model_info() : rollout_side_->engine().model_info();
      rl::TrainBatch batch(groups, rules::kAdvantageEpsilon, version_.load(), env_.record_routed_experts,
                           model.num_moe_layers, model.experts_per_token);
      if (batch.statistics().max_staleness > static_cast<uint64_t>(b.max_trajectory_age_steps))
        throw Error(MLPT_INTERNAL, "staleness " + std::to_string(batch.statistics().max_staleness) + " exceeds max_trajectory_age_steps");
      auto train_started = Clock::now();
      uint64_t new_version = 0;
      phase_ = "training";
      span_at = observer_->now();
      auto trainer_metrics = remote_ ? remote_->train_step(*batch.abi(), &new_version) : trainer_->train_step(*batch.abi(), &new_version);
      const double train_s = seconds_since(train_started);
      observer_->loop_span("train step", span_at, {{"step", step + 1}});
      {
        std::lock_guard l(totals_.m);
        totals_.training_s += train_s;
      }
      auto transfer_started = Clock::now();
      phase_ = "weight transfer";
      span_at = observer_->now();
      const refit::RefitStats refit_stats = update_weights(new_version, samples >= b.first_eval_samples);
      const double transfer_s = seconds_since(transfer_started);
      observer_->loop_span("refit", span_at, {{"version", new_version}, {"bytes", refit_stats.bytes}});
      step_ = step + 1;
      samples_ = samples;
      crash_guard.samples(samples);
      if (step == first_step) log_micro_batching(trainer_metrics);
      if (samples >= b.first_eval_samples) {
        log_->end(mllog::keys::kBlockStop, {{std::string(mllog::keys::kMetaSamplesCount), samples}});
        block_open_ = false;
      }

      StepRecord r = make_step_record(step + 1, samples, batch.statistics(), groups, trainer_metrics, wait_s, train_s,
                                      transfer_s, seconds_since(run_start_));
      r.refit = refit_stats;
      r.plugins = plugin_metrics_.take();
      if (remote_) r.lost_rollout_workers = static_cast<int64_t>(remote_->lost_workers().size());
      steps_.push_back(r);
      last_reward_ = r.reward_mean, last_staleness_ = r.max_staleness;
      if (summary.steps == 0) summary.first_step_reward = r.reward_mean;
      summary.last_step_reward = r.reward_mean;
      summary.steps = step + 1 - first_step;

      if (samples >= b.first_eval_samples) {
        phase_ = "validation";
        span_at = observer_->now();
        auto m = validate(samples);
        observer_->loop_span("evaluation", span_at, {{"samples", samples}});
        if (m) {
          observer_->evaluated(step + 1, evals_.back());
          r.pass_at_k = m->pass_at_k, r.pass_at_1 = m->pass_at_1, r.pass_hat_k = m->pass_hat_k, r.evaluated = true;
          steps_.back() = r;
          summary.best_pass_at_k = std::max(summary.best_pass_at_k, m->pass_at_k);
          if (m->pass_at_k >= b.target_accuracy) summary.converged = true;  // the reference's target test
        }
      }
      metrics << step_record_json(r).dump() << "\n" << std::flush;
      observer_->step_finished(r, max_steps_, runner_->in_flight());
      const bool can_save = remote_ ? remote_->can_save_state() : trainer_->can_save_state();
      if (c.run.checkpoint_every_steps > 0 && (step + 1) % c.run.checkpoint_every_steps == 0 && can_save) {
        save_checkpoint(out_ / "checkpoints", step + 1, samples,
                        [this](const std::filesystem::path& dir) {
                          if (remote_) remote_->save_state(dir.string());
                          else trainer_->save_state(dir.string());
                        },
                        steps_, evals_);
        crash_guard.checkpoint_saved(out_ / "checkpoints" / ("step_" + std::to_string(step + 1)), step + 1);
      }
      if (summary.converged) break;
    }
  } catch (const Error& e) {
    // A call that stopped because of the interrupt is not a failure of its own.
    if (e.code() != MLPT_CANCELLED || !(options_.interrupted && options_.interrupted->load())) fail(e.what());
  } catch (const std::exception& e) {
    fail(std::string("internal error: ") + e.what());
  }

  if (block_open_) log_->end(mllog::keys::kBlockStop, {{std::string(mllog::keys::kMetaSamplesCount), samples_.load()}});
  stop_ = true;
  if (scheduler_) stop_workers();
  if (progress_thread_.joinable()) progress_thread_.join();
  summary.samples = samples_.load();
  if (options_.interrupted && options_.interrupted->load() && failure_.empty()) failure_ = "interrupted";
  summary.aborted = !summary.converged;
  summary.abort_reason = !failure_.empty() ? failure_ : summary.converged ? "" : kNotConvergedReason;
  observer_->run_ended(failure_);
  if (!run_started) log_->start(mllog::keys::kRunStart);  // run_stop needs its run_start to be readable
  log_->end(mllog::keys::kRunStop, {{std::string(mllog::keys::kMetaSamplesCount), summary.samples},
                              {std::string(mllog::keys::kMetaStatus), std::string(summary.converged ? mllog::keys::kStatusSuccess : mllog::keys::kStatusAborted)}});
  crash_guard.log_closed();
  // A resumed run's time to train counts the earlier attempts too (docs/benchmark.md §6).
  summary.time_to_train_minutes = (run_started ? seconds_since(run_start_) / 60.0 : 0.0) + summary.time_already_spent_minutes;

  ReportInputs report{c.run.name, steps_, evals_, {}, summary.converged, summary.abort_reason, summary.time_to_train_minutes};
  {
    std::lock_guard l(totals_.m);
    report.time_split = {{"generation", totals_.generation_s}, {"environment", totals_.environment_s},
                         {"reward", totals_.reward_s},         {"core", totals_.core_s},
                         {"training", totals_.training_s},     {"weight transfer", totals_.weight_transfer_s},
                         {"validation", totals_.validation_s}};
    summary.time_split = report.time_split;
    report.rollouts = totals_.rollouts;
    report.failed_rollouts = totals_.failed_rollouts;
    summary.rollouts = totals_.finished_rollouts;
    summary.failed_rollouts = totals_.failed_rollouts;
    report.generated_tokens = totals_.generated_tokens;
  }
  if (remote_) summary.lost_workers = report.lost_workers = remote_->lost_workers();
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

}  // namespace

RunSummary run_benchmark(const RunConfig& config, const RunOptions& options) {
  BenchmarkRun run(config, options);
  return run.run();
}

}  // namespace mlpt::run
