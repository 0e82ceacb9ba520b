#include "core/run/trainer_settings.hpp"

#include "core/error.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::run {

nlohmann::json trainer_settings(const RunConfig& c, const nlohmann::json& declared) {
  nlohmann::json s = declared.is_object() ? declared : nlohmann::json::object();
  nlohmann::json& opt = s["optimizer"];
  if (opt.is_null()) opt = nlohmann::json::object();
  auto set = [&](const char* key, nlohmann::json value) {
    if (opt.contains(key))
      throw Error(MLPT_INVALID_ARGUMENT, std::string("[components.trainer.settings.optimizer].") + key +
                                             " is set by the run from [benchmark] (and the division's AdamW constants); remove it");
    opt[key] = std::move(value);
  };
  set("lr", c.benchmark.learning_rate);
  set("grad_clip", c.benchmark.gradient_clip_norm);
  set("betas", {rules::kAdamBeta1, rules::kAdamBeta2});
  set("eps", rules::kAdamEpsilon);
  set("weight_decay", rules::kWeightDecay);
  return s;
}

}  // namespace mlpt::run
