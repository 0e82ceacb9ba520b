// Resharding (mlpt.h, mlpt_tensor_shard): the trainer's ranks hold shards of the weights in their
// parallel layout (TP/EP/PP), each engine rank wants shards in its own. plan_reshard says, per
// tensor, which global region comes from which source shard, so that every element a destination
// wants arrives exactly once and nobody gathers the whole model; where sources hold replicas, the
// destinations spread over them. LayoutCut applies the plan on the receiving side of a transport
// (what `receive` with a wanted layout returns): a wanted tensor that a source holds as it is is
// handed over as it is (zero-copy), any other is cut into memory the cut owns (taken over from the
// previous version's cut where it fits, so a refit faults its pages in once).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::sdk {

// A box of a global tensor: [offset[d], offset[d] + extent[d]) in every dimension d.
struct Box {
  std::vector<int64_t> offset, extent;
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t e : extent) n *= e;
    return n;
  }
  bool empty() const { return elements() == 0; }
  bool operator==(const Box&) const = default;
};

// One rank's shard of one tensor.
struct Shard {
  int32_t rank = 0;
  Box box;
};

// Copy `box` (global coordinates) from source `from`'s shard `from_shard` to destination `to`'s
// shard `to_shard` (indices into the lists given to plan_reshard).
struct Move {
  int32_t from = 0, to = 0;
  size_t from_shard = 0, to_shard = 0;
  Box box;
};

namespace detail {
inline std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline Box intersect(const Box& a, const Box& b) {
  Box r{a.offset, a.extent};
  for (size_t d = 0; d < a.offset.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    r.offset[d] = lo, r.extent[d] = std::max<int64_t>(0, hi - lo);
  }
  return r;
}

// `a` less `cut` (which lies inside `a`) as at most 2·ndim disjoint boxes: peel one slab below and
// one above `cut` in each dimension in turn.
inline std::vector<Box> subtract(Box a, const Box& cut) {
  std::vector<Box> rest;
  for (size_t d = 0; d < a.offset.size(); ++d) {
    if (cut.offset[d] > a.offset[d]) {
      Box below = a;
      below.extent[d] = cut.offset[d] - a.offset[d];
      rest.push_back(below);
    }
    const int64_t cut_end = cut.offset[d] + cut.extent[d], a_end = a.offset[d] + a.extent[d];
    if (cut_end < a_end) {
      Box above = a;
      above.offset[d] = cut_end, above.extent[d] = a_end - cut_end;
      rest.push_back(above);
    }
    a.offset[d] = cut.offset[d], a.extent[d] = cut.extent[d];
  }
  return rest;
}

inline void check_inside(const std::string& tensor, const std::vector<int64_t>& global, const Shard& s, const char* side) {
  bool ok = s.box.offset.size() == global.size() && s.box.extent.size() == global.size();
  for (size_t d = 0; ok && d < global.size(); ++d)
    ok = s.box.offset[d] >= 0 && s.box.extent[d] >= 0 && s.box.offset[d] + s.box.extent[d] <= global[d];
  if (!ok)
    throw Error(MLPT_INVALID_ARGUMENT, "reshard of '" + tensor + "': the " + side + " shard of rank " + std::to_string(s.rank) +
                                           " (offset " + shape_text(s.box.offset) + ", shape " + shape_text(s.box.extent) +
                                           ") does not lie in the global shape " + shape_text(global));
}
}  // namespace detail

// Plans one tensor of `global_shape`. Throws MLPT_INVALID_ARGUMENT naming `tensor` when a shard lies
// outside the global shape or has another number of dimensions, and MLPT_FAILED_PRECONDITION naming
// the first element a destination needs that no source holds.
inline std::vector<Move> plan_reshard(const std::string& tensor, const std::vector<int64_t>& global_shape,
                                      const std::vector<Shard>& sources, const std::vector<Shard>& destinations) {
  for (const auto& s : sources) detail::check_inside(tensor, global_shape, s, "source");
  for (const auto& s : destinations) detail::check_inside(tensor, global_shape, s, "destination");
  std::vector<Move> moves;
  for (size_t j = 0; j < destinations.size(); ++j) {
    const Shard& dst = destinations[j];
    std::vector<Box> missing;
    if (!dst.box.empty()) missing.push_back(dst.box);
    // Start at a different source for each destination, so replicas share the sending.
    for (size_t k = 0; k < sources.size() && !missing.empty(); ++k) {
      const size_t i = (static_cast<size_t>(dst.rank) + k) % sources.size();
      std::vector<Box> still;
      for (const Box& m : missing) {
        Box got = detail::intersect(m, sources[i].box);
        if (got.empty()) {
          still.push_back(m);
          continue;
        }
        for (Box& r : detail::subtract(m, got)) still.push_back(std::move(r));
        moves.push_back(Move{sources[i].rank, dst.rank, i, j, std::move(got)});
      }
      missing = std::move(still);
    }
    if (!missing.empty())
      throw Error(MLPT_FAILED_PRECONDITION, "reshard of '" + tensor + "': no source shard holds element " +
                                                detail::shape_text(missing.front().offset) + " that rank " +
                                                std::to_string(dst.rank) + " needs");
  }
  return moves;
}

// The box a shard descriptor describes: offsets and the tensor's own shape (NULL: the whole tensor).
inline Box shard_box(const DLTensor& tensor, const mlpt_tensor_shard* shard) {
  Box b;
  b.extent.assign(tensor.shape, tensor.shape + tensor.ndim);
  if (shard && MLPT_HAS_FIELD(shard, mlpt_tensor_shard, offsets) && shard->offsets)
    b.offset.assign(shard->offsets, shard->offsets + tensor.ndim);
  else
    b.offset.assign(static_cast<size_t>(tensor.ndim), 0);
  return b;
}

// The global shape a shard descriptor names (NULL: the tensor's own shape).
inline std::vector<int64_t> global_shape_of(const DLTensor& tensor, const mlpt_tensor_shard* shard) {
  if (shard && MLPT_HAS_FIELD(shard, mlpt_tensor_shard, global_shape) && shard->global_shape)
    return {shard->global_shape, shard->global_shape + tensor.ndim};
  return {tensor.shape, tensor.shape + tensor.ndim};
}

// True when `shard` (NULL: none) says `tensor` is its whole global tensor.
inline bool is_whole(const DLTensor& tensor, const mlpt_tensor_shard* shard) {
  return shard_box(tensor, shard).offset == std::vector<int64_t>(static_cast<size_t>(tensor.ndim), 0) &&
         global_shape_of(tensor, shard) == std::vector<int64_t>(tensor.shape, tensor.shape + tensor.ndim);
}

// Copies the elements of `box` from `src` (holding `src_box` of the global tensor) into `dst`
// (holding `dst_box`): compact row-major host tensors of one dtype; box lies in both.
inline void copy_box(const DLTensor& src, const Box& src_box, DLTensor& dst, const Box& dst_box, const Box& box) {
  const size_t width = element_bytes(src.dtype);
  const size_t nd = box.extent.size();
  if (box.empty()) return;
  // Row-major strides (in elements) of both shards, and the box's first element in each.
  std::vector<int64_t> ss(nd, 1), ds(nd, 1);
  for (size_t d = nd; d-- > 1;) ss[d - 1] = ss[d] * src_box.extent[d], ds[d - 1] = ds[d] * dst_box.extent[d];
  int64_t s0 = 0, d0 = 0;
  for (size_t d = 0; d < nd; ++d) s0 += (box.offset[d] - src_box.offset[d]) * ss[d], d0 += (box.offset[d] - dst_box.offset[d]) * ds[d];
  const auto* from = static_cast<const std::byte*>(src.data) + src.byte_offset;
  auto* to = static_cast<std::byte*>(dst.data) + dst.byte_offset;
  const size_t run = static_cast<size_t>(nd ? box.extent[nd - 1] : 1) * width;
  // Walk every index of the box but the last dimension (an odometer), one memcpy per row.
  std::vector<int64_t> at(nd, 0);
  for (;;) {
    int64_t s = s0, t = d0;
    for (size_t d = 0; d + 1 < nd; ++d) s += at[d] * ss[d], t += at[d] * ds[d];
    std::memcpy(to + static_cast<size_t>(t) * width, from + static_cast<size_t>(s) * width, run);
    size_t d = nd > 1 ? nd - 1 : 0;
    while (d > 0 && ++at[d - 1] == box.extent[d - 1]) at[d - 1] = 0, --d;
    if (d == 0) return;
  }
}

// Named tensors and, parallel to them, their shard descriptors (NULL: whole tensors). As a wanted
// layout the tensors give name, dtype and the shard's shape; their data is not read.
struct TensorLayout {
  const mlpt_named_tensor* tensors = nullptr;
  const mlpt_tensor_shard* shards = nullptr;
  size_t count = 0;
};

// A wanted layout cut from the shards of one or more source ranks: views for the ABI (tensors and
// shard descriptors) over source memory (handed over as it is) or memory the cut owns. Lives as long
// as the views are used; the sources must outlive it where handed over.
class LayoutCut {
 public:
  // `wanted` count 0: every source tensor whole, in the order the first source lists them. Throws
  // as `receive` documents (transport.h): MLPT_INVALID_ARGUMENT for a tensor no source has or one
  // whose dtype or global shape differs, MLPT_FAILED_PRECONDITION for an element no source holds,
  // MLPT_UNIMPLEMENTED for a cut of device memory.
  // Memory a cut owns: uninitialised (every byte of it is cut), handed on to the next version's.
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
  };

  LayoutCut(const std::vector<TensorLayout>& sources, const TensorLayout& wanted, std::vector<Buffer> reuse = {})
      : reuse_(std::move(reuse)) {
    std::map<std::string, Source> by_name;
    std::vector<std::string> order;
    for (size_t r = 0; r < sources.size(); ++r) {
      for (size_t i = 0; i < sources[r].count; ++i) {
        const auto& t = sources[r].tensors[i];
        const std::string name = to_string(t.name);
        const mlpt_tensor_shard* shard = sources[r].shards ? &sources[r].shards[i] : nullptr;
        auto [it, fresh] = by_name.try_emplace(name);
        Source& s = it->second;
        const auto global = global_shape_of(t.tensor, shard);
        if (fresh) s.dtype = t.tensor.dtype, s.global_shape = global, order.push_back(name);
        if (global != s.global_shape || !(t.tensor.dtype == s.dtype))
          throw Error(MLPT_INVALID_ARGUMENT, "reshard of '" + name + "': source rank " + std::to_string(r) + " has global shape " +
                                                 detail::shape_text(global) + " " + dtype_name(t.tensor.dtype) + ", another rank " +
                                                 detail::shape_text(s.global_shape) + " " + dtype_name(s.dtype));
        s.shards.push_back(Shard{static_cast<int32_t>(r), shard_box(t.tensor, shard)});
        s.data.push_back(&t.tensor);
      }
    }
    std::vector<Want> wants;
    if (wanted.count == 0) {
      for (const auto& name : order) {
        const Source& s = by_name.at(name);
        wants.push_back(Want{name, s.dtype, Box{std::vector<int64_t>(s.global_shape.size(), 0), s.global_shape}, s.global_shape});
      }
    } else {
      for (size_t i = 0; i < wanted.count; ++i) {
        const auto& t = wanted.tensors[i];
        const mlpt_tensor_shard* shard = wanted.shards ? &wanted.shards[i] : nullptr;
        wants.push_back(Want{to_string(t.name), t.tensor.dtype, shard_box(t.tensor, shard), global_shape_of(t.tensor, shard)});
      }
    }
    held_.resize(wants.size());
    for (size_t i = 0; i < wants.size(); ++i) fill(by_name, wants[i], held_[i]);
    for (auto& h : held_) {
      views_.push_back(h.view);
      views_.back().tensor.shape = h.box.extent.data();
      views_.back().name = borrow(h.name);
      shards_.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, h.global_shape.data(), h.box.offset.data()});
    }
  }
  LayoutCut(const LayoutCut&) = delete;
  LayoutCut& operator=(const LayoutCut&) = delete;

  const std::vector<mlpt_named_tensor>& tensors() const { return views_; }
  const std::vector<mlpt_tensor_shard>& shards() const { return shards_; }
  uint64_t bytes_copied() const { return copied_; }    // cut into memory the cut owns
  uint64_t bytes_handed_over() const { return handed_; }  // source memory handed over as it is
  // The memory this cut owns, for the next version's cut to reuse; the views are void after.
  std::vector<Buffer> take_buffers() {
    std::vector<Buffer> out;
    for (auto& h : held_) out.push_back(std::move(h.owned));
    return out;
  }

 private:
  struct Source {
    DLDataType dtype{};
    std::vector<int64_t> global_shape;
    std::vector<Shard> shards;
    std::vector<const DLTensor*> data;
  };
  struct Want {
    std::string name;
    DLDataType dtype{};
    Box box;
    std::vector<int64_t> global_shape;
  };
  struct Held {
    std::string name;
    Box box;
    std::vector<int64_t> global_shape;
    Buffer owned;
    mlpt_named_tensor view{};
  };

  void fill(const std::map<std::string, Source>& by_name, const Want& w, Held& h) {
    auto it = by_name.find(w.name);
    if (it == by_name.end()) throw Error(MLPT_INVALID_ARGUMENT, "the receiver wants '" + w.name + "', which no sender published");
    const Source& src = it->second;
    if (w.global_shape != src.global_shape || !(w.dtype == src.dtype))
      throw Error(MLPT_INVALID_ARGUMENT, "the receiver wants '" + w.name + "' as " + detail::shape_text(w.global_shape) + " " +
                                             dtype_name(w.dtype) + ", the senders published " +
                                             detail::shape_text(src.global_shape) + " " + dtype_name(src.dtype));
    h.name = w.name, h.box = w.box, h.global_shape = w.global_shape;
    h.view.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    // A source shard that is exactly the wanted part is handed over as it is.
    for (size_t k = 0; k < src.shards.size(); ++k) {
      if (src.shards[k].box == w.box) {
        h.view.tensor = *src.data[k];
        handed_ += nbytes(*src.data[k]);
        return;
      }
    }
    const size_t size = static_cast<size_t>(w.box.elements()) * element_bytes(w.dtype);
    const size_t index = static_cast<size_t>(&h - held_.data());
    if (index < reuse_.size() && reuse_[index].data && reuse_[index].size == size) {
      h.owned = std::move(reuse_[index]);
    } else {
      h.owned = Buffer{std::unique_ptr<std::byte[]>(new std::byte[size]), size};
    }
    DLTensor& dst = h.view.tensor;
    dst.data = h.owned.data.get();
    dst.device = DLDevice{kDLCPU, 0};
    dst.ndim = static_cast<int32_t>(w.box.extent.size());
    dst.dtype = w.dtype;
    dst.shape = h.box.extent.data();
    for (const Move& m : plan_reshard(w.name, src.global_shape, src.shards, {Shard{0, w.box}})) {
      const DLTensor& from = *src.data[m.from_shard];
      if (from.device.device_type != kDLCPU && from.device.device_type != kDLCUDAHost)
        throw Error(MLPT_UNIMPLEMENTED, "cutting '" + w.name + "' from device memory (device type " +
                                            std::to_string(from.device.device_type) + ") is not supported: only host memory is cut");
      if (!is_compact(from)) throw Error(MLPT_UNIMPLEMENTED, "cutting '" + w.name + "' from a strided tensor is not supported");
      copy_box(from, src.shards[m.from_shard].box, dst, w.box, m.box);
    }
    copied_ += h.owned.size;
  }

  std::vector<Buffer> reuse_;
  std::vector<Held> held_;
  std::vector<mlpt_named_tensor> views_;
  std::vector<mlpt_tensor_shard> shards_;
  uint64_t copied_ = 0, handed_ = 0;
};

}  // namespace mlpt::sdk
