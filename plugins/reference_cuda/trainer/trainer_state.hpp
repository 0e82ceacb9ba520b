// The trainer's state directory, written alike by one rank and by the ranks of a model-parallel
// trainer (tensor_parallel × expert_parallel × pipeline_parallel), and read under any layout:
//   config.json, model-*.safetensors, model.safetensors.index.json
//       the model as HF transformers and vLLM load it: every tensor of the input checkpoint (text,
//       mtp.*, vision), under its names, in its dtypes (model/weights.hpp, pieces_like_source)
//   optimizer/model-*.safetensors, optimizer/model.safetensors.index.json
//       the fp32 master weights and AdamW moments, "master." / "exp_avg." / "exp_avg_sq." + the
//       model tensor's name, routed experts one tensor per expert (…experts.{e}.gate_proj.weight)
//   trainer_state.json   format, step, weight_version, and the layout that wrote it
//   tokenizer.json, tokenizer_config.json   copied from the input: a state is also a checkpoint
// Every tensor is written whole whatever the layout: its slices are gathered over the
// model-parallel group to one writing rank (a routed expert block to a rank of its
// expert-parallel block where the input stores experts one tensor per expert), which encodes it
// and writes it into its own files (their metadata name it: "mlpt_writer": "trainer group rank
// R"); no rank holds more than what it writes, and group rank 0
// merges the ranks' files into the indexes. Data-parallel replicas other than the first write
// nothing; under the distributed optimizer each holds its range of the moments
// (optimizer_shards.hpp), and every piece's rows are gathered from the replicas' ranges as it is
// written, so no rank holds a whole moment. Loading reads only this rank's slices (read_shard_weights), so a
// state saved under one layout loads under any other (resharded on read), and restores the same layout
// exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/parallel/communicator.hpp"
#include "model/weights.hpp"
#include "trainer/optimizer_shards.hpp"

namespace mlpt::ref {

// A save's piece of a tensor by default (StateRanks::piece_bytes; the trainer's setting save_piece_bytes).
constexpr size_t kSavePieceBytes = size_t{64} << 20;

// Where this rank's part of a trainer's state lies.
struct StateRanks {
  ModelConfig full;                     // the whole model's config (not a shard's)
  ModelShard shard;                     // this rank's shard (tp = ep = 1: the whole model)
  Communicator* model_group = nullptr;  // the shard's tp · ep · pp ranks (rank = shard.model_rank()); NULL: one
  bool writes = true;                   // data-parallel replica 0 writes; the others only take part
  int group_rank = 0;                   // this rank in the trainer group: each file's "mlpt_writer"
  int data_parallel = 1;                // recorded in trainer_state.json
  // Whether every rank of the whole trainer group passed true (a collective every rank calls the
  // same number of times); one rank: itself.
  std::function<bool(bool)> all_ok = [](bool ok) { return ok; };
  // The most fp32 bytes of one tensor a save gathers, encodes and writes at once (whole experts of
  // a routed-expert tensor, blocks of rows of a matrix): what a save holds beyond the state itself.
  size_t piece_bytes = kSavePieceBytes;
  // How the moments a save is given are split over each tensor's data-parallel replicas (one:
  // whole), with the replicas' groups. With several, every replica takes part in the save.
  OptimizerShards moments;
  // MoE parallel folding (trainer_group.hpp): a tensor other than the routed experts' has its
  // replicas over the expert-parallel ranks too (the first of them writes it).
  bool moe_folding = false;

  static StateRanks one(const ModelConfig& config) { return StateRanks{config, {}, nullptr, true, 0, 1}; }
};

// What a save held and wrote on this rank.
struct SaveFootprint {
  size_t largest_piece_bytes = 0;  // the most bytes of gathered values and their encoding held at once
  size_t bytes_written = 0;        // tensor bytes written into this rank's files
};

// Writes the state directory atomically (a complete new directory swapped in over `path`).
// Collective over the trainer group: every rank calls it, `weights` its shard's tensors, `m` and
// `v` theirs or, with ranks.moments split, this replica's ranges of them. A rank's failure (disk full, a bad
// input dtype) fails the save on every rank, and the old directory stays. Each tensor is gathered, encoded
// and written ranks.piece_bytes at a time, so no rank holds a whole tensor (a fused expert tensor is ~17 GB
// in fp32 at 397B) to save it; the bytes written do not depend on piece_bytes.
SaveFootprint save_trainer_state(const std::string& path, const std::string& checkpoint, const Weights<float>& weights,
                                 const Weights<float>& m, const Weights<float>& v, int64_t step, uint64_t version,
                                 const StateRanks& ranks);
inline SaveFootprint save_trainer_state(const std::string& path, const std::string& checkpoint, const Weights<float>& weights,
                                        const Weights<float>& m, const Weights<float>& v, int64_t step, uint64_t version) {
  return save_trainer_state(path, checkpoint, weights, m, v, step, version, StateRanks::one(weights.config));
}

struct TrainerState {
  Weights<float> weights, m, v;  // this rank's shard
  int64_t step = 0;
  uint64_t version = 0;
  std::string saved_layout;  // "tensor_parallel T x expert_parallel E[ x pipeline_parallel P]" of the ranks that wrote it
};
// Reads this rank's shard of a state saved under any layout for a model of `ranks.full`'s tensors
// (with ranks.moments split, only this replica's ranges of m and v are kept, tensor by tensor)
// (errors name the path and what differs; MLPT_DATA_LOSS for unreadable, missing or corrupt
// files, naming the file). The config document stays `current`'s. Not collective: the caller
// decides with its group whether every rank read its part.
TrainerState load_trainer_state(const std::string& path, const Weights<float>& current, const StateRanks& ranks);
inline TrainerState load_trainer_state(const std::string& path, const Weights<float>& current) {
  return load_trainer_state(path, current, StateRanks::one(current.config));
}

}  // namespace mlpt::ref
