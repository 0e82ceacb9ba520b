#include "model/parallel/shard_export.hpp"

#include <cstddef>
#include <cstdint>

#include "model/named_tensors.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::ref {

namespace {

// Joins consecutive boxes that continue each other along one dimension, in the local tensor and in
// the global one alike: a rank that holds a fused tensor whole (GDN's q | k | v under expert
// parallelism alone) exports it as one box, which a transport taking one box per name per sender
// rank can carry.
std::vector<ShardBox> joined(const std::vector<ShardBox>& boxes) {
  std::vector<ShardBox> out;
  for (const ShardBox& b : boxes) {
    if (!out.empty()) {
      ShardBox& last = out.back();
      int along = -1;
      bool continues = last.extent.size() == b.extent.size();
      for (size_t d = 0; continues && d < b.extent.size(); ++d) {
        if (last.local_offset[d] == b.local_offset[d] && last.global_offset[d] == b.global_offset[d] &&
            last.extent[d] == b.extent[d])
          continue;
        continues = along < 0 && b.local_offset[d] == last.local_offset[d] + last.extent[d] &&
                    b.global_offset[d] == last.global_offset[d] + last.extent[d];
        along = static_cast<int>(d);
      }
      if (continues && along >= 0) {
        last.extent[static_cast<size_t>(along)] += b.extent[static_cast<size_t>(along)];
        continue;
      }
    }
    out.push_back(b);
  }
  return out;
}

}  // namespace

void ShardExport::build(Weights<float>& weights, const ModelConfig& full, const ModelShard& shard,
                        mlpt_export_weights_args& args) {
  std::vector<ShardPlacement> placements = shard_placements(full, weights.layout, shard);
  for (ShardPlacement& p : placements) p.boxes = joined(p.boxes);
  std::vector<std::vector<int64_t>> whole_shapes, shapes;
  const std::vector<mlpt_named_tensor> whole = export_named_tensors(weights, whole_shapes);
  tensors_.clear(), global_.clear(), offsets_.clear(), copies_.clear(), shards_.clear();
  std::vector<size_t> tensor_of, copy_of;  // per box: its tensor, and its copy (or SIZE_MAX: a view)
  for (size_t i = 0; i < placements.size(); ++i) {
    const bool view = placements[i].boxes.size() == 1;
    for (const ShardBox& box : placements[i].boxes) {
      tensor_of.push_back(i);
      shapes.push_back(box.extent);
      global_.push_back(placements[i].global_shape);
      offsets_.push_back(box.global_offset);
      copy_of.push_back(view ? SIZE_MAX : copies_.size());
      if (view) continue;
      int64_t n = 1;
      for (int64_t e : box.extent) n *= e;
      copies_.emplace_back(static_cast<size_t>(n));
      copy_local_box(weights.values[i].data(), weights.layout.tensors[i].shape, box, copies_.back().data());
    }
  }
  shapes_ = std::move(shapes);  // every vector is complete: the pointers below stay valid
  for (size_t k = 0; k < tensor_of.size(); ++k) {
    mlpt_named_tensor t = whole[tensor_of[k]];
    t.tensor.shape = shapes_[k].data();
    if (copy_of[k] != SIZE_MAX) t.tensor.data = copies_[copy_of[k]].data();
    tensors_.push_back(t);
    shards_.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, global_[k].data(), offsets_[k].data()});
  }
  if (!sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_export_weights_args, out_shards)))
    throw sdk::Error(MLPT_FAILED_PRECONDITION,
                     "a model-parallel trainer exports shards: the host must know out_shards (ABI 1.2)");
  args.out_tensors = tensors_.data();
  args.out_num_tensors = tensors_.size();
  args.out_shards = shards_.data();
}

}  // namespace mlpt::ref
