// Where a receiver lands a version it pulls from sender ranks: straight into the layout it wants.
// Each version gets one buffer holding every wanted tensor. A piece that is one contiguous run of
// its wanted tensor (and comes in buckets of its own) is received into its place there; any other
// piece (a strided box, or a small one packed into a bucket with others) lands in the rank's part
// buffer and is copied into place once the part landed and checked. receive() then hands the
// wanted layout over as it is, so each byte is copied at most once on the receiving side.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mlpt/mlpt.h"
#include "receive_buffers.hpp"
#include "shard_pulls.hpp"
#include "transport_wire/weight_layout.hpp"

namespace mlpt::transport::ucx {

// Where one piece of a rank's part goes: into wanted tensor `want`, at byte `at` of the version
// buffer when it is one contiguous run there (-1: copied box by box).
struct PiecePlace {
  size_t want = 0;
  int64_t at = -1;
};

class LandingPlan {
 public:
  // `wanted`: list_wanted's tensors; `pulls`: plan_pulls's, as sent to each rank with `request`;
  // `shards`: the receive named a layout (hand out shard descriptors; otherwise whole tensors).
  LandingPlan(uint64_t request, std::vector<WantedTensor> wanted, std::vector<std::vector<Pull>> pulls, bool shards);

  uint64_t request() const { return request_; }
  uint64_t bytes() const { return bytes_; }  // of one version's buffer
  bool shards() const { return shards_; }
  const std::vector<WantedTensor>& wanted() const { return wanted_; }
  uint64_t offset(size_t want) const { return offsets_[want]; }  // of a wanted tensor in the buffer

  // Where each piece of `part` (sender rank `rank`'s stream for this request) goes. Throws
  // MLPT_DATA_LOSS naming the first piece that is not what this receiver pulled from the rank (its
  // name, box, dtype, global shape or size) or that overlaps the one before it in the stream, or a
  // part with another number of pieces.
  std::vector<PiecePlace> places(uint32_t rank, const Layout& part) const;

 private:
  uint64_t request_;
  std::vector<WantedTensor> wanted_;
  std::vector<std::vector<Pull>> pulls_;
  std::vector<uint64_t> offsets_;
  uint64_t bytes_ = 0;
  bool shards_;
};

// One version being landed in a plan's layout. Its buffer comes from the pool and goes back when
// the last part, receive or handed-out version lets go of it.
struct LayoutBuffer {
  LayoutBuffer(std::shared_ptr<const LandingPlan> plan, std::shared_ptr<ReceiveBufferPool> pool, uint64_t version);
  ~LayoutBuffer() { pool->give_back(buffer); }
  LayoutBuffer(const LayoutBuffer&) = delete;
  LayoutBuffer& operator=(const LayoutBuffer&) = delete;

  // Copies piece `piece` of a landed part (its bytes at `data`) into its wanted tensor.
  void copy_in(const TensorMeta& piece, const PiecePlace& place, const uint8_t* data);

  std::shared_ptr<const LandingPlan> plan;
  std::shared_ptr<ReceiveBufferPool> pool;
  ReceiveBuffer buffer;
  uint64_t version;
  bool handed_out = false;  // it completed once: parts of this version landing again start another
  // Of the parts that completed: bytes received straight into place, and bytes copied in.
  uint64_t bytes_in_place = 0, bytes_copied_in = 0;
  std::vector<mlpt_named_tensor> tensors;  // the wanted tensors, over the buffer
  std::vector<mlpt_tensor_shard> shards;   // their descriptors (empty: whole tensors)
};

}  // namespace mlpt::transport::ucx
