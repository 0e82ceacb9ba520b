// How a receiver of several sender ranks gets exactly its layout: each sender rank offers the boxes
// of the global tensors it holds (its shards), the receiver plans which box of which tensor to pull
// from which rank (sdk/reshard.hpp: every wanted element from exactly one rank, replicas shared),
// and tells each rank its pulls; from then on every version a rank sends that receiver is just those
// pieces. Offers and pulls travel as small control messages; this file encodes them, plans them,
// and says where a piece lies in a box (both sides use it to tell a piece they can move as it is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"
#include "mlpt/sdk/reshard.hpp"

namespace mlpt::transport::ucx {

// One tensor a sender rank holds: the part `box` of a global tensor of `global_shape`.
struct OfferedTensor {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> global_shape;
  sdk::Box box;
};

// One piece a receiver pulls from a sender rank: `box` (global coordinates) of tensor `name`.
struct Pull {
  std::string name;
  sdk::Box box;
  size_t want = 0;  // receiver side only (not on the wire): the wanted tensor it is part of
};

// One tensor a receiver wants: `box` of the global tensor `name` of `global_shape`.
struct WantedTensor {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> global_shape;
  sdk::Box box;
};

std::vector<uint8_t> encode_offer(uint64_t version, const std::vector<OfferedTensor>& tensors);
// Throws mlpt::sdk::Error (MLPT_DATA_LOSS) when malformed.
std::vector<OfferedTensor> decode_offer(const uint8_t* data, size_t size, uint64_t* version);

std::vector<uint8_t> encode_pulls(uint64_t request, const std::vector<Pull>& pulls);
// Throws mlpt::sdk::Error (MLPT_DATA_LOSS) when malformed.
std::vector<Pull> decode_pulls(const uint8_t* data, size_t size, uint64_t* request);

// The tensors of `wanted` (transport.h, receive: no tensors = every offered tensor whole, in the
// order rank 0 offers them, then the tensors only later ranks hold). Not checked against the offers.
std::vector<WantedTensor> list_wanted(const std::vector<std::vector<OfferedTensor>>& offers, const sdk::TensorLayout& wanted);

// True when `piece` (inside `box`, both global boxes) is one contiguous run of `box`'s row-major
// memory: full in every dimension after one, and one wide in every dimension before it.
bool contiguous_in(const sdk::Box& box, const sdk::Box& piece);
// The element offset of `piece`'s first element in `box`'s row-major memory.
int64_t first_element_in(const sdk::Box& box, const sdk::Box& piece);

// The pulls of `wanted` (transport.h, receive: no tensors = every offered tensor whole) from the
// sender ranks' offers, one list per rank. Throws MLPT_INVALID_ARGUMENT naming a wanted tensor no
// rank offers or one whose dtype or global shape differs, and MLPT_FAILED_PRECONDITION naming the
// tensor and the wanted box when the ranks' shards do not cover it. `who` prefixes messages.
// Replicas share the sending: tensor i of a wanted layout starts looking at rank (spread + i); every
// tensor whole takes each from the first rank that holds it (the order its pieces arrive in). Each
// pull's `want` indexes list_wanted(offers, wanted).
std::vector<std::vector<Pull>> plan_pulls(const std::vector<std::vector<OfferedTensor>>& offers,
                                          const sdk::TensorLayout& wanted, const std::string& who, size_t spread);

}  // namespace mlpt::transport::ucx
