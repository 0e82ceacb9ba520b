// What the run records per training step and per evaluation: the metrics JSONL rows, the report's
// data and the checkpointed history are all these records.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/components/instances.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/rl/group_buffer.hpp"
#include "core/rl/train_batch.hpp"

namespace mlpt::run {

struct StepRecord {
  int64_t step = 0, samples = 0;
  double reward_mean = 0;
  uint64_t max_staleness = 0;
  double mean_staleness = 0;
  int64_t sequences = 0, tokens = 0, trainable_tokens = 0, truncated = 0, zero_advantage_groups = 0;
  int64_t failed = 0, mixed_version = 0;  // back-filled rollouts; sequences from more than one weight version
  int64_t lost_rollout_workers = 0;  // distributed runs: rollout workers dropped so far (died or went silent)
  double mean_turns = 0;
  std::vector<int64_t> prompts;           // the prompt indices trained, in order (the data order)
  std::map<std::string, double> trainer;  // the trainer's own metrics
  std::map<std::string, double> plugins;  // host services `metric` calls during the step (latest per name)
  double wait_s = 0, train_s = 0, transfer_s = 0, elapsed_s = 0;
  refit::RefitStats refit;                // what the weight transfer after the step moved
  bool evaluated = false;
  double pass_at_k = 0, pass_at_1 = 0, pass_hat_k = 0;
};

struct EvalRecord {
  int64_t samples = 0;
  double pass_at_k = 0, pass_at_1 = 0, pass_hat_k = 0, seconds = 0;
  int64_t failed = 0;  // back-filled validation rollouts (reward 0)
};

StepRecord make_step_record(int64_t step, int64_t samples, const rl::StepStatistics& stats,
                            const std::vector<rl::Group>& groups, const std::vector<components::Metric>& trainer,
                            double wait_s, double train_s, double transfer_s, double elapsed_s);

nlohmann::json step_record_json(const StepRecord& r);
// A refit's statistics as the metrics rows (and a trainer rank's answer to the coordinator) carry them.
nlohmann::json refit_stats_json(const refit::RefitStats& s);
refit::RefitStats refit_stats_from_json(const nlohmann::json& j);
StepRecord step_record_from_json(const nlohmann::json& j);
nlohmann::json eval_record_json(const EvalRecord& r);
EvalRecord eval_record_from_json(const nlohmann::json& j);

}  // namespace mlpt::run
