#include "core/refit/reshard_plan.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/refit/host_tensor.hpp"

namespace mlpt::refit {
namespace {

std::string text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Box intersect(const Box& a, const Box& b) {
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
std::vector<Box> subtract(Box a, const Box& cut) {
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

void check_inside(const std::string& tensor, const std::vector<int64_t>& global, const Shard& s, const char* side) {
  bool ok = s.box.offset.size() == global.size() && s.box.extent.size() == global.size();
  for (size_t d = 0; ok && d < global.size(); ++d)
    ok = s.box.offset[d] >= 0 && s.box.extent[d] >= 0 && s.box.offset[d] + s.box.extent[d] <= global[d];
  if (!ok)
    throw Error(MLPT_INVALID_ARGUMENT, "reshard of '" + tensor + "': the " + side + " shard of rank " + std::to_string(s.rank) +
                                           " (offset " + text(s.box.offset) + ", shape " + text(s.box.extent) +
                                           ") does not lie in the global shape " + text(global));
}

}  // namespace

int64_t Box::elements() const {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

std::vector<Move> plan_reshard(const std::string& tensor, const std::vector<int64_t>& global_shape,
                               const std::vector<Shard>& sources, const std::vector<Shard>& destinations) {
  for (const auto& s : sources) check_inside(tensor, global_shape, s, "source");
  for (const auto& s : destinations) check_inside(tensor, global_shape, s, "destination");
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
        Box got = intersect(m, sources[i].box);
        if (got.empty()) {
          still.push_back(m);
          continue;
        }
        for (Box& r : subtract(m, got)) still.push_back(std::move(r));
        moves.push_back(Move{sources[i].rank, dst.rank, i, j, std::move(got)});
      }
      missing = std::move(still);
    }
    if (!missing.empty())
      throw Error(MLPT_FAILED_PRECONDITION, "reshard of '" + tensor + "': no source shard holds element " +
                                                text(missing.front().offset) + " that rank " + std::to_string(dst.rank) + " needs");
  }
  return moves;
}

Box shard_box(const DLTensor& tensor, const mlpt_tensor_shard* shard) {
  Box b;
  b.extent.assign(tensor.shape, tensor.shape + tensor.ndim);
  if (shard && MLPT_HAS_FIELD(shard, mlpt_tensor_shard, offsets) && shard->offsets)
    b.offset.assign(shard->offsets, shard->offsets + tensor.ndim);
  else
    b.offset.assign(static_cast<size_t>(tensor.ndim), 0);
  return b;
}

bool is_whole(const DLTensor& tensor, const mlpt_tensor_shard* shard) {
  if (!shard || !MLPT_HAS_FIELD(shard, mlpt_tensor_shard, offsets)) return true;
  for (int d = 0; d < tensor.ndim; ++d) {
    if (shard->offsets && shard->offsets[d] != 0) return false;
    if (shard->global_shape && shard->global_shape[d] != tensor.shape[d]) return false;
  }
  return true;
}

void copy_box(const DLTensor& src, const Box& src_box, DLTensor& dst, const Box& dst_box, const Box& box) {
  const size_t width = element_size(src);
  const size_t nd = box.extent.size();
  if (box.empty()) return;
  // Row-major strides (in elements) of both shards, and the box's first element in each.
  std::vector<int64_t> ss(nd, 1), ds(nd, 1);
  for (size_t d = nd; d-- > 1;) ss[d - 1] = ss[d] * src_box.extent[d], ds[d - 1] = ds[d] * dst_box.extent[d];
  int64_t s0 = 0, d0 = 0;
  for (size_t d = 0; d < nd; ++d) s0 += (box.offset[d] - src_box.offset[d]) * ss[d], d0 += (box.offset[d] - dst_box.offset[d]) * ds[d];
  const auto* from = bytes_of(src);
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

}  // namespace mlpt::refit
