// Model parallelism of the reference model: which slice of the weights a rank holds (ModelShard,
// carried by the shard's ModelConfig) and the groups it computes with (ModelParallel).
//
// A layout of tp × ep ranks places world rank ep_rank * tp + tp_rank (tensor-parallel ranks are
// neighbours, as Megatron places them). Tensor parallelism splits attention heads (query and KV;
// where tp exceeds the KV heads, as at TP4 and TP8 with the 397B model's 2, each KV head is
// replicated on the tp / num_kv_heads ranks whose query heads read it, and their partial gradients
// of it summed), GDN key/value heads and the shared expert's FFN columns; each rank's mixer and
// MoE outputs are partial sums, summed over the TP group (in the backward, the input gradients and
// the shared norms' gradients likewise). The routed experts are split into contiguous blocks over
// the routed group: with expert tensor parallelism 1 (etp = 1, the default, as the reference
// trains) every expert is whole on one of all tp · ep ranks; with etp = tp each expert's FFN
// columns are split over the TP ranks too and the blocks over the ep ranks. The tokens of a layer
// are split among the routed group, each rank sends its tokens to the owners of their experts
// (all-to-all), gets the expert outputs back and the group gathers the combined rows
// (expert_dispatch.hpp); with etp = 1 those rows are whole on every TP rank, so only TP rank 0
// adds them to the TP partial sums. The embedding and LM head are split by token ids over the TP
// ranks (vocab_parallel.hpp; unless the shard keeps the vocabulary whole). Everything else (norms,
// router, shared expert gate) is replicated. One rank is the case tp = ep = pp = 1: the same code
// with no group to talk to.
//
// Pipeline parallelism cuts the layers into pp contiguous stages (pipeline_stages.hpp); each stage
// is a tp × ep layout of its own, holding only its layers' tensors (stage 0 the embedding, the last
// stage the final norm and LM head), and passes the residual stream to the next stage (backward:
// its gradient to the previous one) over the pipeline group, point to point. A model-parallel
// group of tp · ep · pp ranks places model rank pp_rank · tp · ep + the stage's world rank.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/parallel/communicator.hpp"

namespace mlpt::ref {

struct ModelShard {
  int tp = 1, tp_rank = 0;  // tensor-parallel size and this rank's place in it
  int ep = 1, ep_rank = 0;  // expert-parallel size and this rank's place in it
  // Expert tensor parallelism: 1 (whole experts over all tp · ep ranks) or tp (expert FFN columns
  // split over the TP ranks, expert blocks over the ep ranks).
  int etp = 1;
  // How many tensor-parallel ranks hold each KV head: 1 when the KV heads split over tp, else
  // tp / num_kv_heads (set by shard_config, which knows the model).
  int kv_replicas = 1;
  int pp = 1, pp_rank = 0;  // pipeline stages and this rank's stage
  // The embedding and LM head split by token ids over the TP ranks (vocab_parallel.hpp; the device
  // model's device_model/vocab_head.hpp), as Megatron always splits them; false keeps them whole on
  // every rank (the memory plan's comparison, tests of a layout without the split).
  bool vocab_parallel = true;
  bool sharded() const { return tp * ep * pp > 1; }
  // This rank within its stage's tp × ep layout (the only layout when pp = 1).
  int world_rank() const { return ep_rank * tp + tp_rank; }
  // This rank within the model-parallel group of all stages.
  int model_rank() const { return pp_rank * tp * ep + world_rank(); }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
  // The routed group: how many blocks the routed experts are split into, and this rank's block.
  int expert_blocks() const { return etp == 1 ? tp * ep : ep; }
  int expert_block() const { return etp == 1 ? world_rank() : ep_rank; }
  // Whether this rank's routed outputs (and input gradients) are whole rows that the other TP ranks
  // also hold, so that only TP rank 0 adds them to the TP group's partial sums.
  bool routed_rows_whole_on_tp_ranks() const { return etp == 1 && tp > 1; }
  static ModelShard of_world_rank(int tp, int ep, int world_rank, int etp = 1) {
    return {tp, world_rank % tp, ep, world_rank / tp, etp};
  }
  // The shard of model rank `model_rank` of a tp × ep × pp model-parallel group.
  static ModelShard of_model_rank(int tp, int ep, int pp, int model_rank, int etp = 1) {
    ModelShard s = of_world_rank(tp, ep, model_rank % (tp * ep), etp);
    s.pp = pp, s.pp_rank = model_rank / (tp * ep);
    return s;
  }
  // The first KV head of a shard holding `kv_heads` of them: its own block, or with replicated KV
  // heads the one head its query heads read (GQA keeps a group of query heads on one rank).
  int64_t first_kv_head(int64_t kv_heads) const { return static_cast<int64_t>(tp_rank / kv_replicas) * kv_heads; }
};

// The groups a shard computes with (forward and backward); NULL stands for a group of one.
struct ModelParallel {
  Communicator* tensor = nullptr;  // the tp ranks with this rank's ep_rank
  Communicator* expert = nullptr;  // the ep ranks with this rank's tp_rank
  // The routed experts' group where it is not `expert` (etp = 1 with tp > 1: all tp · ep ranks).
  Communicator* routed = nullptr;
  // The pp stages' ranks with this rank's place in its stage (rank = pp_rank); NULL: one stage.
  Communicator* pipeline = nullptr;
  // Expert data parallelism (MoE parallel folding): the ep ranks of a stage train different tokens,
  // so only `tensor_rows` (the tensor-parallel group in the routed group's memory, NULL for one
  // rank) hold the same rows as this rank; otherwise every rank of the routed group does.
  bool folded = false;
  Communicator* tensor_rows = nullptr;
  int tensor_size() const { return tensor ? tensor->size() : 1; }
  int pipeline_size() const { return pipeline ? pipeline->size() : 1; }
  int expert_size() const { return expert ? expert->size() : 1; }
  Communicator* routed_group() const { return routed ? routed : expert; }
  int routed_size() const { return routed_group() ? routed_group()->size() : 1; }
  // The ranks of the routed group that hold this rank's rows (expert_dispatch.hpp's sharers).
  Communicator* row_sharers() const { return folded ? tensor_rows : routed_group(); }
};

// A shard computes only with the groups of its layout, and a group of several ranks only with a
// shard: throws MLPT_INVALID_ARGUMENT naming both when `parallel` (NULL: one rank) does not place
// this rank where `shard` (the weights' ModelConfig::shard) says.
void check_groups(const ModelShard& shard, const ModelParallel* parallel);

// Partial sums of a tensor-parallel block, summed over the group in place (NULL or a group of one:
// nothing to do). Model parallelism computes in float32, the precision the communicators carry;
// double throws MLPT_UNIMPLEMENTED on a group of several ranks.
template <class T>
void sum_over(Communicator* group, T* values, size_t count);

}  // namespace mlpt::ref
