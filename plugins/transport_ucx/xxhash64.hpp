// XXH64 (Yann Collet's xxHash, 64-bit variant), written here from the published algorithm: the
// per-bucket checksum of the weight transports. Fast (4 independent lanes), not cryptographic; it
// catches corruption in transit, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlpt::transport {

uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);

}  // namespace mlpt::transport
