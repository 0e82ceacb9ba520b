#include "core/run/step_record.hpp"

namespace mlpt::run {

StepRecord make_step_record(int64_t step, int64_t samples, const rl::StepStatistics& stats,
                            const std::vector<rl::Group>& groups, const std::vector<components::Metric>& trainer,
                            double wait_s, double train_s, double transfer_s, double elapsed_s) {
  StepRecord r;
  r.step = step, r.samples = samples;
  r.reward_mean = stats.reward_mean;
  r.max_staleness = stats.max_staleness;
  r.sequences = stats.sequences, r.tokens = stats.tokens, r.trainable_tokens = stats.trainable_tokens;
  r.truncated = stats.truncated, r.zero_advantage_groups = stats.zero_advantage_groups;
  r.failed = stats.failed, r.mixed_version = stats.mixed_version;
  double staleness = 0, turns = 0;
  int64_t n = 0;
  for (const auto& g : groups) {
    r.prompts.push_back(g.prompt_index);
    for (const auto& t : g.samples) {
      // The trainer's version before this step is step - 1.
      staleness += static_cast<double>(step - 1) - static_cast<double>(t.min_weight_version);
      turns += t.turns;
      ++n;
    }
  }
  r.mean_staleness = n ? staleness / n : 0;
  r.mean_turns = n ? turns / n : 0;
  for (const auto& m : trainer) r.trainer[m.name] = m.value;
  r.wait_s = wait_s, r.train_s = train_s, r.transfer_s = transfer_s, r.elapsed_s = elapsed_s;
  return r;
}

nlohmann::json step_record_json(const StepRecord& r) {
  nlohmann::json j = {{"step", r.step},
                      {"samples", r.samples},
                      {"reward_mean", r.reward_mean},
                      {"max_staleness", r.max_staleness},
                      {"mean_staleness", r.mean_staleness},
                      {"sequences", r.sequences},
                      {"tokens", r.tokens},
                      {"trainable_tokens", r.trainable_tokens},
                      {"truncated", r.truncated},
                      {"zero_advantage_groups", r.zero_advantage_groups},
                      {"failed_rollouts", r.failed},
                      {"mixed_version_sequences", r.mixed_version},
                      {"lost_rollout_workers", r.lost_rollout_workers},
                      {"mean_turns", r.mean_turns},
                      {"prompts", r.prompts},
                      {"trainer", r.trainer},
                      {"plugins", r.plugins},
                      {"wait_s", r.wait_s},
                      {"train_s", r.train_s},
                      {"transfer_s", r.transfer_s},
                      {"elapsed_s", r.elapsed_s},
                      {"refit", refit_stats_json(r.refit)}};
  if (r.evaluated) j["eval"] = {{"pass_at_k", r.pass_at_k}, {"pass_at_1", r.pass_at_1}, {"pass_hat_k", r.pass_hat_k}};
  return j;
}

StepRecord step_record_from_json(const nlohmann::json& j) {
  StepRecord r;
  r.step = j.at("step"), r.samples = j.at("samples"), r.reward_mean = j.at("reward_mean");
  r.max_staleness = j.at("max_staleness"), r.mean_staleness = j.at("mean_staleness");
  r.sequences = j.at("sequences"), r.tokens = j.at("tokens"), r.trainable_tokens = j.at("trainable_tokens");
  r.truncated = j.at("truncated"), r.zero_advantage_groups = j.at("zero_advantage_groups");
  r.mean_turns = j.at("mean_turns");
  r.failed = j.value("failed_rollouts", int64_t{0}), r.mixed_version = j.value("mixed_version_sequences", int64_t{0});
  r.lost_rollout_workers = j.value("lost_rollout_workers", int64_t{0});
  r.prompts = j.value("prompts", std::vector<int64_t>{});
  r.trainer = j.at("trainer").get<std::map<std::string, double>>();
  r.plugins = j.value("plugins", std::map<std::string, double>{});  // absent in runs recorded before it existed
  r.wait_s = j.at("wait_s"), r.train_s = j.at("train_s"), r.transfer_s = j.at("transfer_s"), r.elapsed_s = j.at("elapsed_s");
  if (j.contains("refit")) r.refit = refit_stats_from_json(j["refit"]);  // absent in rows written before the sparse refit
  if (j.contains("eval")) {
    r.evaluated = true;
    r.pass_at_k = j["eval"].at("pass_at_k"), r.pass_at_1 = j["eval"].at("pass_at_1"), r.pass_hat_k = j["eval"].at("pass_hat_k");
  }
  return r;
}

nlohmann::json refit_stats_json(const refit::RefitStats& s) {
  nlohmann::json j = {{"mode", s.mode},
                      {"bytes", s.bytes},
                      {"dense_bytes", s.dense_bytes},
                      {"elements", s.numel},
                      {"changed_elements", s.changed}};
  if (!s.fallback.empty()) j["fallback"] = s.fallback;
  if (s.whole_by_rates) j["whole_by_rates"] = true;  // full although a delta was due: the measured rates said so
  if (s.from_change_list) j["from_change_list"] = true;  // the trainer's marks, not a comparison
  return j;
}

refit::RefitStats refit_stats_from_json(const nlohmann::json& j) {
  refit::RefitStats s{j.at("mode"), j.at("bytes"), j.at("dense_bytes"), j.at("elements"), j.at("changed_elements")};
  s.fallback = j.value("fallback", std::string());
  s.whole_by_rates = j.value("whole_by_rates", false);
  s.from_change_list = j.value("from_change_list", false);
  return s;
}

nlohmann::json eval_record_json(const EvalRecord& r) {
  return {{"samples", r.samples}, {"pass_at_k", r.pass_at_k}, {"pass_at_1", r.pass_at_1}, {"pass_hat_k", r.pass_hat_k},
          {"seconds", r.seconds}, {"failed_rollouts", r.failed}};
}

EvalRecord eval_record_from_json(const nlohmann::json& j) {
  return EvalRecord{j.at("samples"), j.at("pass_at_k"), j.at("pass_at_1"), j.at("pass_hat_k"), j.at("seconds"),
                    j.value("failed_rollouts", int64_t{0})};
}

}  // namespace mlpt::run
