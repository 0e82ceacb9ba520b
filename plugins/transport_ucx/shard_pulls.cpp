#include "shard_pulls.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "mlpt/sdk/error.hpp"
#include "ucx_common.hpp"

namespace mlpt::transport::ucx {

using mlpt::sdk::Error;
using mlpt::sdk::operator==;

std::vector<uint8_t> encode_offer(uint64_t version, const std::vector<OfferedTensor>& tensors) {
  std::vector<uint8_t> out;
  put<uint64_t>(out, version);
  put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    put_string(out, t.name);
    put<uint8_t>(out, t.dtype.code);
    put<uint8_t>(out, t.dtype.bits);
    put<uint16_t>(out, t.dtype.lanes);
    put_box(out, std::vector<int64_t>(t.global_shape.size(), 0), t.global_shape);
    put_box(out, t.box.offset, t.box.extent);
  }
  return out;
}

std::vector<OfferedTensor> decode_offer(const uint8_t* p, size_t size, uint64_t* version) {
  const uint8_t* end = p + size;
  uint32_t n = 0;
  if (!get(p, end, *version) || !get(p, end, n) || n > size) throw Error(MLPT_DATA_LOSS, "a sender rank's shard offer is malformed");
  std::vector<OfferedTensor> out(n);
  for (auto& t : out) {
    std::vector<int64_t> zero;
    bool ok = get_string(p, end, t.name) && get(p, end, t.dtype.code) && get(p, end, t.dtype.bits) && get(p, end, t.dtype.lanes) &&
              get_box(p, end, zero, t.global_shape) && get_box(p, end, t.box.offset, t.box.extent) &&
              t.box.offset.size() == t.global_shape.size();
    if (!ok) throw Error(MLPT_DATA_LOSS, "a sender rank's shard offer is malformed");
  }
  return out;
}

std::vector<uint8_t> encode_pulls(uint64_t request, const std::vector<Pull>& pulls) {
  std::vector<uint8_t> out;
  put<uint64_t>(out, request);
  put<uint32_t>(out, static_cast<uint32_t>(pulls.size()));
  for (const auto& p : pulls) {
    put_string(out, p.name);
    put_box(out, p.box.offset, p.box.extent);
  }
  return out;
}

std::vector<Pull> decode_pulls(const uint8_t* p, size_t size, uint64_t* request) {
  const uint8_t* end = p + size;
  uint32_t n = 0;
  if (!get(p, end, *request) || !get(p, end, n) || n > size) throw Error(MLPT_DATA_LOSS, "a receiver's pull list is malformed");
  std::vector<Pull> out(n);
  for (auto& pull : out)
    if (!get_string(p, end, pull.name) || !get_box(p, end, pull.box.offset, pull.box.extent))
      throw Error(MLPT_DATA_LOSS, "a receiver's pull list is malformed");
  return out;
}

std::vector<WantedTensor> list_wanted(const std::vector<std::vector<OfferedTensor>>& offers, const sdk::TensorLayout& wanted) {
  std::vector<WantedTensor> wants;
  for (size_t i = 0; i < wanted.count; ++i) {
    const auto& t = wanted.tensors[i];
    const mlpt_tensor_shard* shard = wanted.shards ? &wanted.shards[i] : nullptr;
    wants.push_back({sdk::to_string(t.name), t.tensor.dtype, sdk::global_shape_of(t.tensor, shard), sdk::shard_box(t.tensor, shard)});
  }
  if (wanted.count > 0) return wants;
  std::set<std::string> listed;
  for (const auto& rank : offers)
    for (const auto& t : rank)
      if (listed.insert(t.name).second)
        wants.push_back({t.name, t.dtype, t.global_shape, sdk::Box{std::vector<int64_t>(t.global_shape.size(), 0), t.global_shape}});
  return wants;
}

bool contiguous_in(const sdk::Box& box, const sdk::Box& piece) {
  size_t d = piece.extent.size();
  while (d > 0 && piece.extent[d - 1] == box.extent[d - 1]) --d;
  for (size_t k = 0; k + 1 < d; ++k)
    if (piece.extent[k] != 1) return false;
  return true;
}

int64_t first_element_in(const sdk::Box& box, const sdk::Box& piece) {
  int64_t at = 0, stride = 1;
  for (size_t d = piece.extent.size(); d-- > 0;) at += (piece.offset[d] - box.offset[d]) * stride, stride *= box.extent[d];
  return at;
}

std::vector<std::vector<Pull>> plan_pulls(const std::vector<std::vector<OfferedTensor>>& offers,
                                          const sdk::TensorLayout& wanted, const std::string& who, size_t spread) {
  using sdk::detail::shape_text;
  struct Held {
    DLDataType dtype{};
    std::vector<int64_t> global_shape;
    std::vector<sdk::Shard> shards;
  };
  std::map<std::string, Held> held;
  for (size_t r = 0; r < offers.size(); ++r) {
    for (const auto& t : offers[r]) {
      auto [it, fresh] = held.try_emplace(t.name);
      if (fresh) it->second.dtype = t.dtype, it->second.global_shape = t.global_shape;
      if (!(it->second.dtype == t.dtype) || it->second.global_shape != t.global_shape)
        throw Error(MLPT_INVALID_ARGUMENT, who + ": sender rank " + std::to_string(r) + " has '" + t.name + "' as " +
                                               shape_text(t.global_shape) + " " + sdk::dtype_name(t.dtype) + ", another rank as " +
                                               shape_text(it->second.global_shape) + " " + sdk::dtype_name(it->second.dtype));
      it->second.shards.push_back(sdk::Shard{static_cast<int32_t>(r), t.box});
    }
  }
  const std::vector<WantedTensor> wants = list_wanted(offers, wanted);
  std::vector<std::vector<Pull>> pulls(offers.size());
  for (size_t i = 0; i < wants.size(); ++i) {
    const WantedTensor& w = wants[i];
    auto it = held.find(w.name);
    if (it == held.end())
      throw Error(MLPT_INVALID_ARGUMENT, who + " wants '" + w.name + "', which none of the " + std::to_string(offers.size()) +
                                             " sender ranks published");
    const Held& h = it->second;
    if (!(h.dtype == w.dtype) || h.global_shape != w.global_shape)
      throw Error(MLPT_INVALID_ARGUMENT, who + " wants '" + w.name + "' as " + shape_text(w.global_shape) + " " +
                                             sdk::dtype_name(w.dtype) + ", the sender ranks published " +
                                             shape_text(h.global_shape) + " " + sdk::dtype_name(h.dtype));
    // Where ranks hold replicas, the first rank in the list serves: start each tensor (and each
    // receiver) at another one, so the replicas share the sending. Not for every tensor whole: its
    // order is the ranks' (rank 0 first), which is the order its pieces arrive in.
    std::vector<sdk::Shard> sources = h.shards;
    const size_t start = wanted.count > 0 ? (spread + i) % sources.size() : 0;
    std::rotate(sources.begin(), sources.begin() + static_cast<std::ptrdiff_t>(start), sources.end());
    std::vector<sdk::Move> moves;
    try {
      moves = sdk::plan_reshard(w.name, h.global_shape, sources, {sdk::Shard{0, w.box}});
    } catch (const Error& e) {
      throw Error(e.code(), who + " wants box offset " + shape_text(w.box.offset) + " shape " + shape_text(w.box.extent) + " of '" +
                                w.name + "' (global " + shape_text(w.global_shape) + "), which the " + std::to_string(offers.size()) +
                                " sender ranks' shards do not cover: " + e.what());
    }
    for (auto& m : moves) pulls[static_cast<size_t>(m.from)].push_back(Pull{w.name, std::move(m.box), i});
  }
  return pulls;
}

}  // namespace mlpt::transport::ucx
