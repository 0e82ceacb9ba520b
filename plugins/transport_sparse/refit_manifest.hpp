// The message of a sparse-mode refit: what travels through the weight transport for one version.
// Its first tensor, named "mlpt.refit" (uint8, 1-D), is this manifest; the others are the weights:
//   full   the weight tensors themselves (their own name, dtype and shape), which replace the
//          receiver's copy;
//   delta  one uint8 tensor per weight, same name and order as the last full message, holding the
//          sparse encoding (sparse_delta.hpp) of what changed since `base_version`;
//   marked the same, encoded from the trainer's change list (mlpt/sdk/changed_elements.hpp)
//          instead of a comparison: the sender holds no copy of the weights.
// The manifest carries, per weight tensor in message order, a checksum (xxhash64). For full and
// delta: of the tensor the sender holds at `version`; the receiver checks what it rebuilt against
// it, so a copy that diverged (a lost update, a wrong base) is an error, never silent. For marked:
// of the tensor's delta as sent, checked before it is applied (a sender that keeps no copy cannot
// hash the whole tensor without reading it all, which is what the change list saves); a full
// version (every `full_every` refits, see the plugin's README) replaces and checks the whole copy.
//
// Encoding (little-endian): "MLRF" | u8 kind | u8[3] 0 | u64 base_version | u64 version |
// u64 count | count × u64 hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mlpt::sparse_refit {

inline constexpr std::string_view kManifestName = "mlpt.refit";

struct RefitManifest {
  enum class Kind : uint8_t { full = 1, delta = 2, marked = 3 };
  Kind kind = Kind::full;
  uint64_t base_version = 0;  // delta: the version the receiver must hold; full: 0
  uint64_t version = 0;
  std::vector<uint64_t> hashes;  // xxhash64 of each weight tensor at `version`, in message order
};

std::vector<std::byte> encode_manifest(const RefitManifest& m);
// Throws MLPT_DATA_LOSS saying what is malformed.
RefitManifest decode_manifest(const std::byte* data, size_t size);

}  // namespace mlpt::sparse_refit
