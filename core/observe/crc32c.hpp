// CRC-32C (Castagnoli, the iSCSI polynomial), and the "masked" form TensorBoard's record files
// store: a CRC over data that itself holds CRCs is weak, so each stored CRC is rotated and offset.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlpt::observe {

// `crc` continues an earlier call over the bytes before `data` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The value a tfevents record stores for `crc`: rotated right by 15 bits plus a constant.
uint32_t masked_crc32c(uint32_t crc);

}  // namespace mlpt::observe
