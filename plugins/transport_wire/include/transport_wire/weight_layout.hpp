// The wire picture of one version of the weights, shared by the UCX and NCCL transports.
//
// Every tensor gets a byte range in one contiguous "stream" (offsets aligned to 64 bytes), which is
// exactly the receiver's buffer: a receiver lands every bucket straight in place and never unpacks.
// A bucket is a contiguous range of that stream of at most bucket_bytes:
//   - direct: a slice of one large tensor, sent straight from the tensor's own memory (zero staging);
//   - packed: several small tensors (< kPackBelow each) copied into a staging buffer, padding zeroed.
// The metadata message (encode/decode) carries names, dtypes, shapes, offsets, the version and the
// bucket list; decode checks every range so that a malformed message is an error, never a wild write.
// Format 2 (written only when used) adds, per tensor, which box of its global tensor it is (one
// sender rank's shard, or the piece of it a receiver asked for) and, per version, the id of the
// receiver's request the pieces answer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "mlpt/mlpt.h"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::transport {

inline constexpr uint64_t kAlignment = 64;
inline constexpr uint64_t kPackBelow = 256 * 1024;  // tensors smaller than this are packed

struct TensorMeta {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // in the stream
  uint64_t nbytes = 0;
  // The box of the global tensor this is: global shape and the box's first element. Empty: whole.
  std::vector<int64_t> global_shape, box_offset;
};

struct Bucket {
  uint64_t offset = 0;  // in the stream
  uint64_t size = 0;
  // Sender side only (not on the wire): direct_tensor >= 0 means the bytes are
  // tensors[direct_tensor].data + (offset - tensors[direct_tensor].offset); otherwise the bucket
  // packs tensors [first_member, end_member).
  int64_t direct_tensor = -1;
  uint32_t first_member = 0, end_member = 0;
};

struct Layout {
  uint64_t version = 0;
  uint64_t total_bytes = 0;
  bool checksums = false;  // the sender computes one xxhash64 per bucket
  uint64_t request = 0;    // the receiver request these pieces answer (0: the sender's tensors as they are)
  std::vector<TensorMeta> tensors;
  std::vector<Bucket> buckets;
};

// Plans `tensors` into buckets of at most `bucket_bytes`. Throws mlpt::sdk::Error
// (MLPT_INVALID_ARGUMENT) naming the tensor for an empty or duplicate name, a non-compact tensor, a
// negative dimension or NULL data with bytes. `where` prefixes messages (e.g. "ucx send").
inline Layout plan_layout(const mlpt_named_tensor* tensors, size_t num_tensors, uint64_t version,
                   uint64_t bucket_bytes, bool checksums, const std::string& where);

inline std::vector<uint8_t> encode_metadata(const Layout& layout);
// Throws mlpt::sdk::Error (MLPT_DATA_LOSS) saying what is malformed.
inline Layout decode_metadata(const void* data, size_t size);

// Copies a packed bucket's members from the sender's tensors into `staging` (bucket.size bytes).
inline void pack_bucket(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors,
                 uint8_t* staging);
// Where a direct bucket's bytes are in the sender's memory.
inline const uint8_t* direct_source(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors);

// "tensors a, b, c" overlapping a bucket, for error messages (at most a few names).
inline std::string bucket_contents(const Layout& layout, size_t bucket);

// ---- Definitions (header-only: every plugin builds them with its own flags) ----

namespace layout_detail {

using mlpt::sdk::Error;

inline constexpr uint32_t kMagic = 0x544C4D57;  // "WMLT"
inline constexpr uint16_t kFormat = 1;
inline constexpr uint16_t kFormatWithBoxes = 2;  // + request id, + per tensor global shape and box offset

inline uint64_t align_up(uint64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

class Writer {
 public:
  template <class T>
  void put(T v) {
    auto at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  void put_bytes(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), left_(size) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return v;
  }
  std::string get_string(const char* what) {
    auto n = get<uint32_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return s;
  }
  size_t left() const { return left_; }

 private:
  void need(size_t n, const char* what) {
    if (left_ < n) throw Error(MLPT_DATA_LOSS, std::string("weight metadata truncated while reading ") + what);
  }
  const uint8_t* p_;
  size_t left_;
};

}  // namespace layout_detail

using namespace layout_detail;  // NOLINT: the helpers above, for the definitions below

inline Layout plan_layout(const mlpt_named_tensor* tensors, size_t num_tensors, uint64_t version,
                   uint64_t bucket_bytes, bool checksums, const std::string& where) {
  if (bucket_bytes == 0) throw Error(MLPT_INVALID_ARGUMENT, where + ": bucket_bytes must be > 0");
  if (num_tensors > 0 && !tensors) throw Error(MLPT_INVALID_ARGUMENT, where + ": tensors is NULL");
  Layout layout;
  layout.version = version;
  layout.checksums = checksums;
  layout.tensors.reserve(num_tensors);
  std::unordered_set<std::string> names;
  uint64_t pack_below = std::min(kPackBelow, bucket_bytes);
  uint64_t cursor = 0;
  Bucket* open = nullptr;  // the packed bucket still taking members
  for (size_t i = 0; i < num_tensors; ++i) {
    const auto& nt = tensors[i];
    const DLTensor& t = nt.tensor;
    TensorMeta m;
    m.name = mlpt::sdk::to_string(nt.name);
    std::string who = where + ": tensor " + std::to_string(i) + " '" + m.name + "'";
    if (m.name.empty()) throw Error(MLPT_INVALID_ARGUMENT, who + " has an empty name");
    if (!names.insert(m.name).second) throw Error(MLPT_INVALID_ARGUMENT, who + " appears twice");
    if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) throw Error(MLPT_INVALID_ARGUMENT, who + " has no shape");
    for (int d = 0; d < t.ndim; ++d)
      if (t.shape[d] < 0) throw Error(MLPT_INVALID_ARGUMENT, who + " has negative dimension " + std::to_string(d));
    if (!mlpt::sdk::is_compact(t)) throw Error(MLPT_INVALID_ARGUMENT, who + " is not compact row-major");
    if (t.dtype.lanes == 0 || t.dtype.bits == 0) throw Error(MLPT_INVALID_ARGUMENT, who + " has a zero-width dtype");
    m.dtype = t.dtype;
    m.shape.assign(t.shape, t.shape + t.ndim);
    m.nbytes = mlpt::sdk::nbytes(t);
    if (m.nbytes > 0 && !t.data) throw Error(MLPT_INVALID_ARGUMENT, who + " has NULL data");
    m.offset = align_up(cursor);
    if (m.nbytes == 0) {
      layout.tensors.push_back(std::move(m));
      continue;
    }
    if (m.nbytes < pack_below) {
      if (open && m.offset + m.nbytes - open->offset <= bucket_bytes) {
        open->size = m.offset + m.nbytes - open->offset;
        open->end_member = static_cast<uint32_t>(i + 1);
      } else {
        Bucket b;
        b.offset = m.offset;
        b.size = m.nbytes;
        b.first_member = static_cast<uint32_t>(i);
        b.end_member = static_cast<uint32_t>(i + 1);
        layout.buckets.push_back(b);
        open = &layout.buckets.back();
      }
    } else {
      open = nullptr;
      for (uint64_t done = 0; done < m.nbytes; done += bucket_bytes) {
        Bucket b;
        b.offset = m.offset + done;
        b.size = std::min(bucket_bytes, m.nbytes - done);
        b.direct_tensor = static_cast<int64_t>(i);
        layout.buckets.push_back(b);
      }
    }
    // A later push_back may move the vector: keep `open` valid by re-pointing at the last bucket.
    if (open) open = &layout.buckets.back();
    cursor = m.offset + m.nbytes;
    layout.tensors.push_back(std::move(m));
  }
  layout.total_bytes = align_up(cursor);
  return layout;
}

inline std::vector<uint8_t> encode_metadata(const Layout& layout) {
  // Format 1 while nothing needs boxes, so a receiver of format 1 still reads whole tensors.
  const bool boxes = layout.request != 0 || std::any_of(layout.tensors.begin(), layout.tensors.end(),
                                                        [](const TensorMeta& t) { return !t.global_shape.empty(); });
  Writer w;
  w.put<uint32_t>(kMagic);
  w.put<uint16_t>(boxes ? kFormatWithBoxes : kFormat);
  w.put<uint16_t>(layout.checksums ? 1 : 0);
  w.put<uint64_t>(layout.version);
  if (boxes) w.put<uint64_t>(layout.request);
  w.put<uint64_t>(layout.total_bytes);
  w.put<uint32_t>(static_cast<uint32_t>(layout.tensors.size()));
  w.put<uint32_t>(static_cast<uint32_t>(layout.buckets.size()));
  for (const auto& t : layout.tensors) {
    w.put_bytes(t.name);
    w.put<uint8_t>(t.dtype.code);
    w.put<uint8_t>(t.dtype.bits);
    w.put<uint16_t>(t.dtype.lanes);
    w.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.put<int64_t>(d);
    w.put<uint64_t>(t.offset);
    w.put<uint64_t>(t.nbytes);
    if (boxes) {
      w.put<uint8_t>(t.global_shape.empty() ? 0 : 1);
      if (!t.global_shape.empty())
        for (size_t d = 0; d < t.shape.size(); ++d) w.put<int64_t>(t.global_shape[d]), w.put<int64_t>(t.box_offset[d]);
    }
  }
  for (const auto& b : layout.buckets) {
    w.put<uint64_t>(b.offset);
    w.put<uint64_t>(b.size);
  }
  return std::move(w.out);
}

inline Layout decode_metadata(const void* data, size_t size) {
  Reader r(data, size);
  if (r.get<uint32_t>("magic") != kMagic) throw Error(MLPT_DATA_LOSS, "weight metadata has a wrong magic number");
  const auto format = r.get<uint16_t>("format");
  if (format != kFormat && format != kFormatWithBoxes)
    throw Error(MLPT_DATA_LOSS, "weight metadata format " + std::to_string(format) + ", expected " + std::to_string(kFormat) +
                                    " or " + std::to_string(kFormatWithBoxes));
  const bool boxes = format == kFormatWithBoxes;
  Layout layout;
  layout.checksums = (r.get<uint16_t>("flags") & 1) != 0;
  layout.version = r.get<uint64_t>("version");
  if (boxes) layout.request = r.get<uint64_t>("request");
  layout.total_bytes = r.get<uint64_t>("total_bytes");
  auto num_tensors = r.get<uint32_t>("tensor count");
  auto num_buckets = r.get<uint32_t>("bucket count");
  // Each tensor needs >= 28 bytes and each bucket 16: refuse counts the message cannot hold.
  if (uint64_t(num_tensors) * 28 + uint64_t(num_buckets) * 16 > r.left())
    throw Error(MLPT_DATA_LOSS, "weight metadata claims more tensors/buckets than it holds");
  layout.tensors.resize(num_tensors);
  for (auto& t : layout.tensors) {
    t.name = r.get_string("tensor name");
    t.dtype.code = r.get<uint8_t>("dtype");
    t.dtype.bits = r.get<uint8_t>("dtype");
    t.dtype.lanes = r.get<uint16_t>("dtype");
    auto ndim = r.get<uint32_t>("ndim");
    if (ndim > 64) throw Error(MLPT_DATA_LOSS, "tensor '" + t.name + "' claims " + std::to_string(ndim) + " dimensions");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      int64_t v = r.get<int64_t>("shape");
      if (v < 0) throw Error(MLPT_DATA_LOSS, "tensor '" + t.name + "' has a negative dimension");
      t.shape.push_back(v);
      numel = v == 0 ? 0 : (numel > UINT64_MAX / uint64_t(v) ? UINT64_MAX : numel * uint64_t(v));
    }
    t.offset = r.get<uint64_t>("offset");
    t.nbytes = r.get<uint64_t>("nbytes");
    const uint64_t elem = sdk::element_bytes(t.dtype);
    if (numel == UINT64_MAX || numel * elem != t.nbytes)
      throw Error(MLPT_DATA_LOSS, "tensor '" + t.name + "': byte count does not match shape and dtype");
    if (t.offset > layout.total_bytes || t.nbytes > layout.total_bytes - t.offset)
      throw Error(MLPT_DATA_LOSS, "tensor '" + t.name + "' lies outside the " + std::to_string(layout.total_bytes) + "-byte buffer");
    if (boxes && r.get<uint8_t>("box flag") != 0) {
      for (size_t d = 0; d < t.shape.size(); ++d) {
        t.global_shape.push_back(r.get<int64_t>("global shape"));
        t.box_offset.push_back(r.get<int64_t>("box offset"));
        if (t.box_offset[d] < 0 || t.global_shape[d] < 0 || t.box_offset[d] > t.global_shape[d] ||
            t.shape[d] > t.global_shape[d] - t.box_offset[d])
          throw Error(MLPT_DATA_LOSS, "tensor '" + t.name + "': its box does not lie in its global shape");
      }
    }
  }
  layout.buckets.resize(num_buckets);
  for (auto& b : layout.buckets) {
    b.offset = r.get<uint64_t>("bucket offset");
    b.size = r.get<uint64_t>("bucket size");
    if (b.offset > layout.total_bytes || b.size > layout.total_bytes - b.offset)
      throw Error(MLPT_DATA_LOSS, "a bucket lies outside the weight buffer");
  }
  if (r.left() != 0) throw Error(MLPT_DATA_LOSS, "weight metadata has trailing bytes");
  return layout;
}

inline void pack_bucket(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors, uint8_t* staging) {
  uint64_t at = bucket.offset;
  for (uint32_t i = bucket.first_member; i < bucket.end_member; ++i) {
    const auto& m = layout.tensors[i];
    if (m.offset > at) std::memset(staging + (at - bucket.offset), 0, m.offset - at);
    const auto& t = tensors[i].tensor;
    std::memcpy(staging + (m.offset - bucket.offset), static_cast<const uint8_t*>(t.data) + t.byte_offset, m.nbytes);
    at = m.offset + m.nbytes;
  }
}

inline const uint8_t* direct_source(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors) {
  const auto& m = layout.tensors[static_cast<size_t>(bucket.direct_tensor)];
  const auto& t = tensors[bucket.direct_tensor].tensor;
  return static_cast<const uint8_t*>(t.data) + t.byte_offset + (bucket.offset - m.offset);
}

inline std::string bucket_contents(const Layout& layout, size_t bucket) {
  const auto& b = layout.buckets.at(bucket);
  std::string out;
  int shown = 0, more = 0;
  for (const auto& t : layout.tensors) {
    if (t.nbytes == 0 || t.offset >= b.offset + b.size || t.offset + t.nbytes <= b.offset) continue;
    if (shown < 3) {
      out += (shown ? ", '" : "'") + t.name + "'";
      ++shown;
    } else {
      ++more;
    }
  }
  if (more) out += " and " + std::to_string(more) + " more";
  return out.empty() ? "no tensor" : "tensor " + out;
}

}  // namespace mlpt::transport
