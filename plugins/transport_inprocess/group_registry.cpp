#include "group_registry.hpp"

#include <mlpt/sdk/reshard.hpp>

namespace mlpt::transport::inprocess {

std::shared_ptr<Published> Published::copy(uint64_t version, const mlpt_named_tensor* in, const mlpt_tensor_shard* shards,
                                           size_t n) {
  auto p = std::make_shared<Published>();
  p->version = version;
  p->names.resize(n), p->shapes.resize(n), p->strides.resize(n), p->tensors.resize(n);
  if (shards) p->global_shapes.resize(n), p->offsets.resize(n), p->shards.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const DLTensor& t = in[i].tensor;
    if (t.ndim < 0 || (t.ndim > 0 && !t.shape))
      throw mlpt::sdk::Error(MLPT_INVALID_ARGUMENT, "inprocess: tensor " + std::to_string(i) + " has no shape");
    p->names[i] = mlpt::sdk::to_string(in[i].name);
    p->shapes[i].assign(t.shape, t.shape + t.ndim);
    if (t.strides) p->strides[i].assign(t.strides, t.strides + t.ndim);
    auto& out = p->tensors[i];
    out.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    out.name = mlpt::sdk::borrow(p->names[i]);
    out.tensor = t;  // same data pointer, device, dtype, byte_offset: zero-copy
    out.tensor.shape = p->shapes[i].data();
    out.tensor.strides = t.strides ? p->strides[i].data() : nullptr;
    if (shards) {
      p->global_shapes[i] = mlpt::sdk::global_shape_of(t, &shards[i]);
      p->offsets[i] = mlpt::sdk::shard_box(t, &shards[i]).offset;
      p->shards[i] = mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, p->global_shapes[i].data(), p->offsets[i].data()};
    }
  }
  return p;
}

std::shared_ptr<Published> Published::join(uint64_t version, const std::vector<std::shared_ptr<Published>>& parts) {
  if (parts.size() == 1) return parts[0];
  for (const auto& part : parts)
    if (part->ready.kind != MLPT_READY_ON_RETURN)
      throw mlpt::sdk::Error(MLPT_UNIMPLEMENTED, "inprocess: " + std::to_string(parts.size()) +
                                                     " sender ranks with device data ready after an event each: send it ready on return");
  std::vector<mlpt_named_tensor> tensors;
  std::vector<mlpt_tensor_shard> shards;
  for (const auto& part : parts) {
    for (size_t i = 0; i < part->tensors.size(); ++i) {
      tensors.push_back(part->tensors[i]);
      shards.push_back(part->shards.empty() ? mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, nullptr, nullptr} : part->shards[i]);
    }
  }
  return copy(version, tensors.data(), shards.data(), tensors.size());
}

std::shared_ptr<Group> group_named(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Group>> groups;
  std::lock_guard lock(mutex);
  auto& g = groups[name];
  if (!g) g = std::make_shared<Group>();
  return g;
}

}  // namespace mlpt::transport::inprocess
