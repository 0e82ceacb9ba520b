// What a model-parallel trainer rank exports (mlpt/trainer.h export_weights, ABI 1.2 sharded
// tensors): one named tensor per box of this rank's shard (shard_boxes.hpp), each with its place in
// the whole model's tensor (mlpt_tensor_shard), boxes that continue each other joined (a fused
// tensor a rank holds whole, as GDN's q | k | v under expert parallelism alone, is one box, which a
// transport taking one box per name per sender rank can carry).
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.hpp"
#include "mlpt/trainer.h"

namespace mlpt::ref {

class ShardExport {
 public:
  // Fills args.out_tensors, out_num_tensors and out_shards with this rank's boxes of `weights` (fp32,
  // CPU: the shard of `shard` of a model of config `full`): a view of the tensor where it is one box,
  // a copy of each box where it holds several. Valid until the next build and while `weights` lives
  // unchanged. Throws MLPT_FAILED_PRECONDITION when the host's args have no out_shards (ABI < 1.2).
  void build(Weights<float>& weights, const ModelConfig& full, const ModelShard& shard, mlpt_export_weights_args& args);

 private:
  std::vector<mlpt_named_tensor> tensors_;
  std::vector<std::vector<int64_t>> shapes_, global_, offsets_;  // per box
  std::vector<mlpt_tensor_shard> shards_;
  std::vector<std::vector<float>> copies_;  // the boxes of tensors that hold several
};

}  // namespace mlpt::ref
