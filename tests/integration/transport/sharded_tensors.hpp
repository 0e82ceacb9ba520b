// The tensors of the sender-ranks tests: a whole set per version (mixed dtypes, 1-, 2- and 3-D, one
// large enough for direct buckets), and the shards of it a layout gives each rank: sender ranks
// split the first dimension (row shards; "norm" replicated on every rank), receivers the last one
// (column shards). Shared by the test and the processes it starts, so both cut the same boxes.
#pragma once

#include <string>
#include <vector>

#include "mlpt/sdk/reshard.hpp"
#include "transport_support.hpp"

namespace transport_test {

inline TensorSet whole_tensors(uint64_t version) {
  TensorSet s;
  s.add("layers.0.mlp.up_proj.weight", {kDLFloat, 32, 1}, {64, 3001});
  s.add("norm", {kDLFloat, 32, 1}, {17});  // replicated on every sender rank (not last: order counts)
  s.add("layers.0.self_attn.q_proj.weight", {kDLBfloat, 16, 1}, {10, 1031});
  s.add("layers.0.mlp.experts.down_proj", {kDLInt, 16, 1}, {4, 6, 10});
  s.add("embed", {kDLUInt, 8, 1}, {7, 5});
  s.add("bias", {kDLInt, 16, 1}, {1001});
  s.fill(version);
  return s;
}

// Part `index` of `parts` of dimension `dim` of a tensor of `shape` (the first parts one larger).
inline mlpt::sdk::Box split(const std::vector<int64_t>& shape, size_t dim, int64_t parts, int64_t index) {
  mlpt::sdk::Box b{std::vector<int64_t>(shape.size(), 0), shape};
  const int64_t n = shape[dim], base = n / parts, extra = n % parts;
  b.offset[dim] = index * base + std::min(index, extra);
  b.extent[dim] = base + (index < extra ? 1 : 0);
  return b;
}

// One rank's shards: the boxes, their bytes cut from the whole set, and the ABI views.
struct ShardSet {
  std::vector<mlpt::sdk::Box> boxes;
  std::vector<std::vector<int64_t>> global_shapes;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<mlpt_named_tensor> views;
  std::vector<mlpt_tensor_shard> shards;
};

inline ShardSet cut(const TensorSet& whole, const std::vector<mlpt::sdk::Box>& boxes) {
  ShardSet s;
  s.boxes = boxes;
  s.global_shapes = whole.shapes;
  const size_t n = boxes.size();
  s.bytes.resize(n), s.views.resize(n), s.shards.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const mlpt::sdk::Box all{std::vector<int64_t>(whole.shapes[i].size(), 0), whole.shapes[i]};
    s.bytes[i].resize(static_cast<size_t>(boxes[i].elements()) * mlpt::sdk::element_bytes(whole.dtypes[i]));
    s.views[i] = whole.views[i];
    s.views[i].tensor.data = s.bytes[i].empty() ? nullptr : s.bytes[i].data();
    s.views[i].tensor.shape = s.boxes[i].extent.data();
    mlpt::sdk::copy_box(whole.views[i].tensor, all, s.views[i].tensor, boxes[i], boxes[i]);
    s.shards[i] = mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, s.global_shapes[i].data(), s.boxes[i].offset.data()};
  }
  return s;
}

// Sender rank `rank` of `ranks`: rows (the first dimension), "norm" whole on every rank.
inline std::vector<mlpt::sdk::Box> row_boxes(const TensorSet& whole, int64_t rank, int64_t ranks) {
  std::vector<mlpt::sdk::Box> out;
  for (size_t i = 0; i < whole.names.size(); ++i)
    out.push_back(whole.names[i] == "norm" ? split(whole.shapes[i], 0, 1, 0) : split(whole.shapes[i], 0, ranks, rank));
  return out;
}

// Receiver `index` of `count`: columns (the last dimension).
inline std::vector<mlpt::sdk::Box> column_boxes(const TensorSet& whole, int64_t index, int64_t count) {
  std::vector<mlpt::sdk::Box> out;
  for (const auto& shape : whole.shapes) out.push_back(split(shape, shape.size() - 1, count, index));
  return out;
}

// The wanted layout of receiver `index` of `count` (columns), as names/dtypes/shapes and boxes.
struct WantedColumns {
  TensorSet whole = whole_tensors(1);
  std::vector<mlpt::sdk::Box> boxes;
  std::vector<mlpt_named_tensor> tensors;
  std::vector<mlpt_tensor_shard> shards;
  WantedColumns(int64_t index, int64_t count) : boxes(column_boxes(whole, index, count)) {
    tensors = whole.views;
    for (size_t i = 0; i < tensors.size(); ++i) {
      tensors[i].tensor.data = nullptr;
      tensors[i].tensor.shape = boxes[i].extent.data();
      shards.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, whole.shapes[i].data(), boxes[i].offset.data()});
    }
  }
};

// The parts `boxes` of the whole set, as a receiver should hold them.
inline TensorSet expected_parts(const TensorSet& whole, const std::vector<mlpt::sdk::Box>& boxes) {
  ShardSet parts = cut(whole, boxes);
  TensorSet out;
  for (size_t i = 0; i < boxes.size(); ++i) out.add(whole.names[i], whole.dtypes[i], boxes[i].extent);
  out.fill(0);
  out.bytes = parts.bytes;
  return out;
}

}  // namespace transport_test
