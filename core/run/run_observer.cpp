#include "core/run/run_observer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>

#include "core/run/run_dir.hpp"

namespace mlpt::run {
namespace {

using observe::PrometheusMetrics;
constexpr auto kGauge = PrometheusMetrics::Type::kGauge;

// Timeline groups ("processes" in the trace format) and the loop's own track.
constexpr int kRankGroup = 1, kLoopTrack = 1;
constexpr int kRolloutGroup = 2;
constexpr size_t kSpansKeptPerSlot = 32;

}  // namespace

std::filesystem::path trace_file(const std::filesystem::path& run_dir) {
  return run_dir / "trace.json";
}
std::filesystem::path tensorboard_dir(const std::filesystem::path& run_dir) {
  return run_dir / "tensorboard";
}
std::filesystem::path flight_recorder_dir(const std::filesystem::path& run_dir) {
  return run_dir / "flight_recorder";
}

RunObserver::RunObserver(const RunConfig& config, const std::filesystem::path& run_dir) : run_dir_(run_dir) {
  // The endpoint first: a port already taken fails the run before it writes anything.
  metrics_.set("mlpt_run_info", kGauge, "the run (labels: name, division); always 1", 1,
               {{"name", config.run.name}, {"division", config.run.division}});
  metrics_.set("mlpt_step", kGauge, "training steps done", 0);
  if (config.run.metrics_port > 0)
    endpoint_ =
        std::make_unique<observe::MetricsEndpoint>(metrics_, static_cast<int>(config.run.metrics_port));
  events_ = std::make_unique<observe::TfEventsWriter>(tensorboard_dir(run_dir));
  auto& recorder = observe::FlightRecorder::instance();
  if (config.run.trace_max_mb > 0) {
    keep_aside(trace_file(run_dir));  // an earlier attempt's, when resumed
    trace_ = std::make_unique<observe::TraceWriter>(trace_file(run_dir), "mlpt run " + config.run.name,
                                                    static_cast<uint64_t>(config.run.trace_max_mb) << 20);
    trace_->name_group(kRankGroup, "rank 0: the loop and its plugin calls", 0);
    trace_->name_track(kRankGroup, kLoopTrack, "loop (steps, refits, evaluation)", 0);
    trace_->name_group(kRolloutGroup, "rollout slots", 1);
    calls_ = std::make_unique<observe::CallTimeline>(*trace_, kRankGroup);
    recorder.set_listener(calls_.get());
  }
  std::filesystem::create_directories(flight_recorder_dir(run_dir));
  recorder.set_dump_folder(flight_recorder_dir(run_dir));
  dump_on_signal_ = std::make_unique<observe::DumpOnSignal>([](const std::filesystem::path& path) {
    std::fprintf(stderr, "[mlpt] SIGUSR1: the last calls into every plugin are in %s\n", path.c_str());
  });
  if (config.run.hang_dump_after_s > 0)
    hang_watch_ = std::make_unique<observe::HangWatch>(
        config.run.hang_dump_after_s,
        [this](const observe::CallRecord& call, double running_s, const auto& dump) {
          metrics_.add("mlpt_hung_calls_total", "plugin calls that ran past [run] hang_dump_after_s", 1,
                       {{"kind", call.kind}, {"call", call.call}});
          std::fprintf(stderr, "%s\n", observe::HangWatch::message("", call, running_s, dump).c_str());
        });
}

RunObserver::~RunObserver() {
  hang_watch_.reset();  // first: its reports use the metrics
  dump_on_signal_.reset();
  observe::FlightRecorder::instance().set_listener(nullptr);
  observe::FlightRecorder::instance().set_dump_folder({});
}

double RunObserver::now() const {
  return trace_ ? trace_->now() : 0.0;
}

void RunObserver::loop_span(const std::string& name, double start, const nlohmann::json& args) {
  if (trace_) trace_->span(kRankGroup, kLoopTrack, name, "loop", start, trace_->now() - start, args);
}

int RunObserver::slot_for(const std::string& worker, double start, double end) {
  for (size_t i = 0;; ++i) {
    if (i == slots_.size()) {
      // A rollout worker's slots are its own tracks, named for it; a run in one process has only
      // "local" (and a back-fill, whose worker is not known, takes any).
      int of_worker = 0;
      for (const auto& s : slots_) of_worker += s.worker == worker;
      slots_.push_back({{}, 0, worker});
      const std::string prefix = worker.empty() || worker == "local" ? "" : worker + " ";
      trace_->name_track(kRolloutGroup, static_cast<int>(i) + 1, prefix + "slot " + std::to_string(of_worker),
                         static_cast<int>(i));
    }
    Slot& slot = slots_[i];
    if (!worker.empty() && slot.worker != worker) continue;
    const bool free =
        start >= slot.floor && std::none_of(slot.spans.begin(), slot.spans.end(),
                                            [&](const auto& s) { return start < s.second && s.first < end; });
    if (!free) continue;
    slot.spans.emplace_back(start, end);
    if (slot.spans.size() > kSpansKeptPerSlot) {  // forget the one that ended first
      auto first = std::min_element(slot.spans.begin(), slot.spans.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
      slot.floor = std::max(slot.floor, first->second);
      slot.spans.erase(first);
    }
    return static_cast<int>(i) + 1;
  }
}

void RunObserver::rollout_ended(const rollout::Trajectory& t, bool validation, bool failed) {
  const std::string worker = t.rollout_worker.empty() ? "local" : t.rollout_worker;
  metrics_.add("mlpt_rollouts_total", "rollouts that ended (labels: kind, outcome, worker)", 1,
               {{"kind", validation ? "validation" : "training"},
                {"outcome", failed ? "failed" : "ok"},
                {"worker", worker}});
  if (failed) return;
  metrics_.add("mlpt_generated_tokens_total", "tokens the engine generated in rollouts",
               static_cast<double>(t.generated_tokens()));
  {
    std::lock_guard lock(mutex_);
    generated_tokens_ += t.generated_tokens();
  }
  if (!trace_ || t.wall_s <= 0) return;
  const double end = trace_->now(), start = end - t.wall_s;
  int track;
  {
    std::lock_guard lock(mutex_);
    track = slot_for(worker, start, end);
  }
  // Children are clamped into the rollout's span, so the track nests as the format requires.
  auto child = [&](const char* name, double from, double seconds, const nlohmann::json& args) {
    from = std::clamp(from, start, end);
    const double to = std::clamp(from + seconds, from, end);
    if (to > from) trace_->span(kRolloutGroup, track, name, "rollout", from, to - from, args);
  };
  trace_->span(kRolloutGroup, track, validation ? "validation rollout" : "rollout", "rollout", start,
               t.wall_s,
               {{"prompt_index", t.prompt_index},
                {"sample", t.sample_index},
                {"reward", t.reward},
                {"turns", t.turns},
                {"generated_tokens", t.generated_tokens()},
                {"worker", worker}});
  const auto& turns = t.transcript.turns;
  if (!turns.empty()) child("sandbox + harness start", start, turns.front().start_s, nullptr);
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& turn = turns[i];
    child("generation", start + turn.start_s, turn.generation_s,
          {{"turn", i + 1},
           {"context_tokens", turn.context_tokens},
           {"generated_tokens", turn.generated_tokens},
           {"weight_version", turn.weight_version}});
    child("tool execution", start + turn.start_s + turn.generation_s, turn.environment_s, {{"turn", i + 1}});
  }
  child("grading", end - t.reward_s, t.reward_s, {{"reward", t.reward}});
}

void RunObserver::rollout_back_filled(const rollout::EpisodeRequest& request, bool validation,
                                      double started_at, const std::string& reason) {
  if (!trace_) return;
  const double end = trace_->now(), start = std::min(started_at, end);
  int track;
  {
    std::lock_guard lock(mutex_);
    track = slot_for("", start, end);
  }
  constexpr size_t kReasonChars = 300;  // the whole reason is in the run's stderr and its rollout record
  trace_->span(kRolloutGroup, track, validation ? "back-filled validation rollout" : "back-filled rollout",
               "rollout", start, end - start,
               {{"prompt_index", request.prompt_index},
                {"sample", request.sample_index},
                {"reward", 0},
                {"reason", reason.substr(0, kReasonChars)}});
}

void RunObserver::rollouts_in_flight(const std::map<std::string, int64_t>& by_worker) {
  for (const auto& [worker, in_flight] : by_worker)
    metrics_.set("mlpt_rollouts_in_flight_per_worker", kGauge,
                 "rollouts running on each rollout worker now (label: worker)",
                 static_cast<double>(in_flight), {{"worker", worker}});
  // The timeline's counter of the rollout slots, written when it changed.
  if (!trace_) return;
  {
    std::lock_guard lock(mutex_);
    if (by_worker == last_in_flight_) return;
    last_in_flight_ = by_worker;
  }
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [worker, in_flight] : by_worker) values[worker] = in_flight;
  trace_->counter(kRolloutGroup, "rollouts in flight", trace_->now(), values);
}

void RunObserver::step_finished(const StepRecord& r, int64_t max_steps, int64_t rollouts_in_flight) {
  double tokens_per_s = 0;
  {
    std::lock_guard lock(mutex_);
    const double dt = r.elapsed_s - last_step_at_;
    if (dt > 0) tokens_per_s = static_cast<double>(generated_tokens_ - last_step_tokens_) / dt;
    last_step_at_ = r.elapsed_s, last_step_tokens_ = generated_tokens_;
  }
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/reward_mean", r.reward_mean},
      {"train/samples", static_cast<double>(r.samples)},
      {"train/staleness_max", static_cast<double>(r.max_staleness)},
      {"train/staleness_mean", r.mean_staleness},
      {"train/tokens", static_cast<double>(r.tokens)},
      {"train/trainable_tokens", static_cast<double>(r.trainable_tokens)},
      {"train/truncated_sequences", static_cast<double>(r.truncated)},
      {"train/zero_advantage_groups", static_cast<double>(r.zero_advantage_groups)},
      {"train/failed_rollouts", static_cast<double>(r.failed)},
      {"train/mean_turns", r.mean_turns},
      {"time/wait_s", r.wait_s},
      {"time/train_s", r.train_s},
      {"time/transfer_s", r.transfer_s},
      {"time/elapsed_s", r.elapsed_s},
      {"refit/bytes", static_cast<double>(r.refit.bytes)},
      {"refit/dense_bytes", static_cast<double>(r.refit.dense_bytes)},
      {"throughput/generated_tokens_per_s", tokens_per_s}};
  for (const auto& [name, value] : r.trainer) scalars.emplace_back("trainer/" + name, value);
  for (const auto& [name, value] : r.plugins) scalars.emplace_back("plugin/" + name, value);
  events_->scalars(r.step, scalars);

  auto step = metrics_.batch();  // a scrape sees all of the step or none of it
  step.set("mlpt_step", kGauge, "training steps done", static_cast<double>(r.step));
  step.set("mlpt_max_steps", kGauge, "training steps the run may take", static_cast<double>(max_steps));
  step.set("mlpt_samples", kGauge, "samples trained (the result log's samples_count)",
           static_cast<double>(r.samples));
  step.set("mlpt_reward_mean", kGauge, "the last step's mean training reward", r.reward_mean);
  step.set("mlpt_staleness_max", kGauge, "the last step's largest staleness (weight versions)",
           static_cast<double>(r.max_staleness));
  step.set("mlpt_rollouts_in_flight", kGauge, "rollouts running when the last step ended",
           static_cast<double>(rollouts_in_flight));
  step.set("mlpt_generated_tokens_per_second", kGauge, "tokens generated per second over the last step",
           tokens_per_s);
  step.set("mlpt_train_step_seconds", kGauge, "the last step's trainer time", r.train_s);
  step.set("mlpt_wait_for_rollouts_seconds", kGauge, "how long the last step waited for its rollouts",
           r.wait_s);
  step.set("mlpt_refit_bytes", kGauge, "bytes the last refit moved", static_cast<double>(r.refit.bytes));
  step.set("mlpt_refit_seconds", kGauge, "the last refit's time (drain, pause, move, resume)",
           r.transfer_s);
  step.add("mlpt_refit_bytes_total", "bytes every refit moved", static_cast<double>(r.refit.bytes));
  step.set("mlpt_lost_rollout_workers", kGauge, "rollout workers dropped so far (distributed runs)",
           static_cast<double>(r.lost_rollout_workers));
  for (const auto& [name, value] : r.trainer)
    step.set("mlpt_trainer_metric", kGauge, "the trainer's metrics of the last step (label: name)", value,
             {{"name", name}});
}

void RunObserver::evaluated(int64_t step, const EvalRecord& e) {
  events_->scalars(step, {{"eval/pass_at_k", e.pass_at_k},
                          {"eval/pass_at_1", e.pass_at_1},
                          {"eval/pass_hat_k", e.pass_hat_k},
                          {"eval/seconds", e.seconds},
                          {"eval/failed_rollouts", static_cast<double>(e.failed)}});
  metrics_.set("mlpt_pass_at_k", kGauge, "the last evaluation's pass@k", e.pass_at_k);
  metrics_.set("mlpt_pass_at_1", kGauge, "the last evaluation's pass@1", e.pass_at_1);
  metrics_.add("mlpt_evaluations_total", "evaluations done", 1);
}

void RunObserver::run_ended(const std::string& abort_reason) {
  metrics_.set("mlpt_run_finished", kGauge, "1 once the run has ended", 1);
  if (abort_reason.empty()) return;
  const auto path = observe::FlightRecorder::instance().dump("aborted", abort_reason);
  if (!path.empty()) std::fprintf(stderr, "[mlpt] the last calls into every plugin: %s\n", path.c_str());
}

}  // namespace mlpt::run
