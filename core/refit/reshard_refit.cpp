#include "core/refit/reshard_refit.hpp"

#include <map>

#include "core/error.hpp"
#include "core/refit/host_tensor.hpp"

namespace mlpt::refit {
namespace {

std::string name_of(const mlpt_named_tensor& t) { return std::string(t.name.data, t.name.size); }

std::vector<int64_t> global_shape_of(const RankWeights& r, size_t i) {
  const DLTensor& t = r.tensors[i].tensor;
  const mlpt_tensor_shard* s = r.shards ? &r.shards[i] : nullptr;
  if (s && MLPT_HAS_FIELD(s, mlpt_tensor_shard, global_shape) && s->global_shape)
    return {s->global_shape, s->global_shape + t.ndim};
  return {t.shape, t.shape + t.ndim};
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Where a tensor lives on the source side: per source shard, its rank and index there.
struct SourceTensor {
  DLDataType dtype{};
  std::vector<int64_t> global_shape;
  std::vector<Shard> shards;
  std::vector<const DLTensor*> data;
};

}  // namespace

uint64_t ShardSet::bytes() const {
  uint64_t n = 0;
  for (const auto& h : held_) n += h.data.size();
  return n;
}

std::vector<ShardSet> reshard(const std::vector<RankWeights>& sources, const std::vector<RankWeights>& destinations) {
  std::map<std::string, SourceTensor> by_name;
  for (size_t r = 0; r < sources.size(); ++r) {
    for (size_t i = 0; i < sources[r].count; ++i) {
      const auto& t = sources[r].tensors[i];
      const std::string name = name_of(t);
      require_host_compact(t.tensor, "source rank " + std::to_string(r) + "'s '" + name + "'");
      auto [it, fresh] = by_name.try_emplace(name);
      SourceTensor& s = it->second;
      const auto global = global_shape_of(sources[r], i);
      if (fresh) s.dtype = t.tensor.dtype, s.global_shape = global;
      if (global != s.global_shape || t.tensor.dtype.bits != s.dtype.bits || t.tensor.dtype.code != s.dtype.code)
        throw Error(MLPT_INVALID_ARGUMENT, "reshard of '" + name + "': source rank " + std::to_string(r) + " has global shape " +
                                               shape_text(global) + ", another rank " + shape_text(s.global_shape) +
                                               " (or another dtype)");
      s.shards.push_back(Shard{static_cast<int32_t>(r), shard_box(t.tensor, sources[r].shards ? &sources[r].shards[i] : nullptr)});
      s.data.push_back(&t.tensor);
    }
  }
  std::vector<ShardSet> out(destinations.size());
  for (size_t r = 0; r < destinations.size(); ++r) {
    const RankWeights& want = destinations[r];
    ShardSet& set = out[r];
    set.held_.resize(want.count);
    for (size_t i = 0; i < want.count; ++i) {
      const auto& t = want.tensors[i];
      const std::string name = name_of(t);
      auto it = by_name.find(name);
      if (it == by_name.end())
        throw Error(MLPT_INVALID_ARGUMENT, "reshard: destination rank " + std::to_string(r) + " wants '" + name + "', which no source has");
      const SourceTensor& src = it->second;
      const auto global = global_shape_of(want, i);
      if (global != src.global_shape || t.tensor.dtype.bits != src.dtype.bits || t.tensor.dtype.code != src.dtype.code)
        throw Error(MLPT_INVALID_ARGUMENT, "reshard of '" + name + "': destination rank " + std::to_string(r) + " wants global shape " +
                                               shape_text(global) + ", the sources have " + shape_text(src.global_shape) +
                                               " (or another dtype)");
      ShardSet::Held& h = set.held_[i];
      const Box box = shard_box(t.tensor, want.shards ? &want.shards[i] : nullptr);
      h.name = name, h.dtype = t.tensor.dtype, h.shape = box.extent, h.global_shape = global, h.offsets = box.offset;
      h.data.resize(static_cast<size_t>(box.elements()) * element_size(t.tensor));
      DLTensor dst{};
      dst.data = h.data.data();
      dst.device = DLDevice{kDLCPU, 0};
      dst.ndim = t.tensor.ndim;
      dst.dtype = h.dtype;
      dst.shape = h.shape.data();
      for (const Move& m : plan_reshard(name, src.global_shape, src.shards, {Shard{static_cast<int32_t>(r), box}}))
        copy_box(*src.data[m.from_shard], src.shards[m.from_shard].box, dst, box, m.box);
    }
    // Views once every buffer is in place (their addresses are final now).
    for (auto& h : set.held_) {
      mlpt_named_tensor v{};
      v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      v.name = mlpt_string{h.name.data(), h.name.size()};
      v.tensor.data = h.data.data();
      v.tensor.device = DLDevice{kDLCPU, 0};
      v.tensor.ndim = static_cast<int32_t>(h.shape.size());
      v.tensor.dtype = h.dtype;
      v.tensor.shape = h.shape.data();
      set.views_.push_back(v);
      set.shards_.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, h.global_shape.data(), h.offsets.data()});
    }
  }
  return out;
}

}  // namespace mlpt::refit
