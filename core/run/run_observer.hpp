// What a run shows while it goes, from core/observe/: the timeline (trace.json: one track per
// rank's loop and plugin component, one per rollout slot), TensorBoard events (tensorboard/), the
// Prometheus endpoint ([run] metrics_port) and the flight recorder's dumps (flight_recorder/:
// when the run aborts, on `kill -USR1 PID`, from the crash guard, and when a plugin call runs past
// [run] hang_dump_after_s). The benchmark loop tells it
// what happened; this decides what each view shows.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/observe/call_timeline.hpp"
#include "core/observe/dump_on_signal.hpp"
#include "core/observe/flight_recorder.hpp"
#include "core/observe/hang_watch.hpp"
#include "core/observe/metrics_endpoint.hpp"
#include "core/observe/prometheus_text.hpp"
#include "core/observe/tfevents_writer.hpp"
#include "core/observe/trace_writer.hpp"
#include "core/rollout/episode.hpp"
#include "core/rollout/trajectory.hpp"
#include "core/run/run_config.hpp"
#include "core/run/step_record.hpp"

namespace mlpt::run {

// Where each view lives in a run folder.
std::filesystem::path trace_file(const std::filesystem::path& run_dir);           // trace.json
std::filesystem::path tensorboard_dir(const std::filesystem::path& run_dir);      // tensorboard/
std::filesystem::path flight_recorder_dir(const std::filesystem::path& run_dir);  // flight_recorder/

class RunObserver final {
 public:
  // Starts every view of the run in `run_dir` (a resumed run keeps the earlier trace aside, as
  // trace_attempt_N.json). Throws when the metrics port cannot be had.
  RunObserver(const RunConfig& config, const std::filesystem::path& run_dir);
  ~RunObserver();
  RunObserver(const RunObserver&) = delete;
  RunObserver& operator=(const RunObserver&) = delete;

  // Seconds on the timeline's clock: what a span's start is given as.
  double now() const;
  // A phase of the loop ("train step", "refit", "evaluation", ...) from `start` to now.
  void loop_span(const std::string& name, double start, const nlohmann::json& args = nullptr);
  // A rollout that ended (`failed`: the infrastructure failed, no trajectory); its spans go on the
  // first slot of its rollout worker free over its time: the rollout, its setup, each turn's
  // generation and tool execution, and its grading.
  void rollout_ended(const rollout::Trajectory& t, bool validation, bool failed);
  // A rollout that failed for an infrastructure reason is back-filled (it trains as reward 0): a
  // span from `started_at` to now on a free rollout slot, saying why.
  void rollout_back_filled(const rollout::EpisodeRequest& request, bool validation, double started_at,
                           const std::string& reason);
  // Episodes in flight on each rollout worker (EpisodeRunner::in_flight_by_worker): a gauge of
  // /metrics, and a counter of the timeline's rollout slots.
  void rollouts_in_flight(const std::map<std::string, int64_t>& by_worker);
  void step_finished(const StepRecord& r, int64_t max_steps, int64_t rollouts_in_flight);
  void evaluated(int64_t step, const EvalRecord& e);
  // The run ended; an aborted one (`abort_reason` not empty) dumps the flight recorder.
  void run_ended(const std::string& abort_reason);

  std::filesystem::path trace() const { return trace_ ? trace_->file() : std::filesystem::path(); }
  std::filesystem::path tensorboard() const { return tensorboard_dir(run_dir_); }
  int metrics_port() const { return endpoint_ ? endpoint_->port() : 0; }

 private:
  // The first slot of `worker` ("": any) free over [start, end), made when none is; with mutex_ held.
  int slot_for(const std::string& worker, double start, double end);

  const std::filesystem::path run_dir_;
  std::unique_ptr<observe::TraceWriter> trace_;
  std::unique_ptr<observe::CallTimeline> calls_;  // this rank's plugin calls on the timeline
  std::unique_ptr<observe::TfEventsWriter> events_;
  observe::PrometheusMetrics metrics_;
  std::unique_ptr<observe::MetricsEndpoint> endpoint_;
  std::mutex mutex_;
  struct Slot {
    std::vector<std::pair<double, double>> spans;  // the latest few, to check a new one against
    double floor = 0;                              // every older span ended by then
    std::string worker;                            // the rollout worker whose rollouts it shows
  };
  std::vector<Slot> slots_;
  std::map<std::string, int64_t> last_in_flight_;  // the counter's last values
  double last_step_at_ = 0;
  int64_t last_step_tokens_ = 0, generated_tokens_ = 0;
  std::unique_ptr<observe::DumpOnSignal> dump_on_signal_;  // kill -USR1
  std::unique_ptr<observe::HangWatch> hang_watch_;         // [run] hang_dump_after_s
};

}  // namespace mlpt::run
