// The trainer's settings as the run hands them over: its [components.trainer.settings] plus the
// optimizer values of [benchmark], so the result log and the trainer can never disagree. The
// optimizer block follows the trainer ABI's convention {"optimizer": {"lr", "grad_clip", "betas",
// "eps", "weight_decay"}}; setting one of these in the component table as well is an error.
#pragma once

#include <nlohmann/json.hpp>

#include "core/run/run_config.hpp"

namespace mlpt::run {

nlohmann::json trainer_settings(const RunConfig& config, const nlohmann::json& declared);

}  // namespace mlpt::run
