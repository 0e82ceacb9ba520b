// The resharding refit within one process: every destination rank (an engine rank) gets exactly
// the shards it holds, cut from the source ranks' shards (trainer ranks) by plan_reshard; each
// element is copied once, from one source, and nothing is ever gathered whole. Across processes the
// same plan drives the transport (each move one message from one rank to another).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/refit/reshard_plan.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::refit {

// One rank's tensors and, parallel to them, their shard descriptors (NULL: whole tensors). For a
// destination the tensors describe what it wants: name, dtype and the shard's shape; data unused.
struct RankWeights {
  const mlpt_named_tensor* tensors = nullptr;
  const mlpt_tensor_shard* shards = nullptr;
  size_t count = 0;
};

// The shards one destination rank received: memory it owns, and views for load_weights.
class ShardSet {
 public:
  ShardSet() = default;
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;
  ShardSet(ShardSet&&) = default;
  ShardSet& operator=(ShardSet&&) = default;

  const std::vector<mlpt_named_tensor>& tensors() const { return views_; }
  const std::vector<mlpt_tensor_shard>& shards() const { return shards_; }
  uint64_t bytes() const;  // the bytes this rank received

 private:
  friend std::vector<ShardSet> reshard(const std::vector<RankWeights>&, const std::vector<RankWeights>&);
  struct Held {
    std::string name;
    DLDataType dtype{};
    std::vector<int64_t> shape, global_shape, offsets;
    std::vector<std::byte> data;
  };
  std::vector<Held> held_;
  std::vector<mlpt_named_tensor> views_;
  std::vector<mlpt_tensor_shard> shards_;
};

// Fills each destination's shards from the sources (source and destination ranks are their indices
// in the two lists). Throws MLPT_INVALID_ARGUMENT naming the tensor when a destination wants one no
// source has, or the ranks disagree on its dtype or global shape; MLPT_FAILED_PRECONDITION when
// the sources do not cover what a destination wants (plan_reshard).
std::vector<ShardSet> reshard(const std::vector<RankWeights>& sources, const std::vector<RankWeights>& destinations);

}  // namespace mlpt::refit
