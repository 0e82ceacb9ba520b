// The wire picture of one version of the weights, shared by the UCX and NCCL transports.
//
// Every tensor gets a byte range in one contiguous "stream" (offsets aligned to 64 bytes), which is
// exactly the receiver's buffer: a receiver lands every bucket straight in place and never unpacks.
// A bucket is a contiguous range of that stream of at most bucket_bytes:
//   - direct: a slice of one large tensor, sent straight from the tensor's own memory (zero staging);
//   - packed: several small tensors (< kPackBelow each) copied into a staging buffer, padding zeroed.
// The metadata message (encode/decode) carries names, dtypes, shapes, offsets, the version and the
// bucket list; decode checks every range so that a malformed message is an error, never a wild write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::transport {

inline constexpr uint64_t kAlignment = 64;
inline constexpr uint64_t kPackBelow = 256 * 1024;  // tensors smaller than this are packed

struct TensorMeta {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // in the stream
  uint64_t nbytes = 0;
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
  std::vector<TensorMeta> tensors;
  std::vector<Bucket> buckets;
};

// Plans `tensors` into buckets of at most `bucket_bytes`. Throws mlpt::sdk::Error
// (MLPT_INVALID_ARGUMENT) naming the tensor for an empty or duplicate name, a non-compact tensor, a
// negative dimension or NULL data with bytes. `where` prefixes messages (e.g. "ucx send").
Layout plan_layout(const mlpt_named_tensor* tensors, size_t num_tensors, uint64_t version,
                   uint64_t bucket_bytes, bool checksums, const std::string& where);

std::vector<uint8_t> encode_metadata(const Layout& layout);
// Throws mlpt::sdk::Error (MLPT_DATA_LOSS) saying what is malformed.
Layout decode_metadata(const void* data, size_t size);

// Copies a packed bucket's members from the sender's tensors into `staging` (bucket.size bytes).
void pack_bucket(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors,
                 uint8_t* staging);
// Where a direct bucket's bytes are in the sender's memory.
const uint8_t* direct_source(const Layout& layout, const Bucket& bucket, const mlpt_named_tensor* tensors);

// "tensors a, b, c" overlapping a bucket, for error messages (at most a few names).
std::string bucket_contents(const Layout& layout, size_t bucket);

}  // namespace mlpt::transport
