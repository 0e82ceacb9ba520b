#include "core/observe/crc32c.hpp"

#include <array>

namespace mlpt::observe {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;  // 0x1EDC6F41, bits reversed
constexpr uint32_t kMaskDelta = 0xA282EAD8u;

// One byte's effect on the CRC, for all 256 bytes: the usual table-driven CRC, one lookup a byte.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ kReflectedPolynomial : crc >> 1;
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kTable[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

}  // namespace mlpt::observe
