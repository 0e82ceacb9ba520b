// What crosses between the ranks of a distributed run, as JSON values (sent as CBOR by
// core/dist/mpi/channel.hpp): an episode the coordinator hands a rollout worker, the trajectory it
// sends back (every field the core keeps and the transcript the coordinator records), and a trainer
// rank's share of the step's batch. Per-token arrays travel as bytes, so floats keep every bit:
// decoding what was encoded gives back the same values. Decoding errors are MLPT_DATA_LOSS naming
// the field.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/rollout/episode.hpp"
#include "core/rollout/trajectory.hpp"
#include "mlpt/trainer.h"

namespace mlpt::dist {

nlohmann::json trajectory_json(const rollout::Trajectory& t);
rollout::Trajectory trajectory_from(const nlohmann::json& j);

// The request with its task row (the worker keeps `task` alive while the episode runs).
nlohmann::json episode_json(const rollout::EpisodeRequest& request);
rollout::EpisodeRequest episode_from(const nlohmann::json& j, const nlohmann::json* task);

// A packed batch (mlpt_train_batch) and the arrays its decoded form points into.
nlohmann::json batch_json(const mlpt_train_batch& batch);
struct DecodedBatch {
  std::vector<int64_t> offsets;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> generation_logprobs, advantages;
  std::vector<int16_t> routed_experts;
  mlpt_train_batch abi{};  // points into the vectors above
};
void batch_from(const nlohmann::json& j, DecodedBatch& out);

}  // namespace mlpt::dist
