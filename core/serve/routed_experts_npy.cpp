#include "core/serve/routed_experts_npy.hpp"

#include <algorithm>

namespace mlpt::serve {
namespace {

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t j = 0; j < 3; ++j) v = (v << 8) | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kAlphabet[(v >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

}  // namespace

std::string routed_experts_npy_base64(const std::vector<int16_t>& experts, size_t positions, size_t layers, size_t k) {
  // .npy format 1.0: magic, version, little-endian header length, a Python dict literal padded with
  // spaces and ended by '\n' so the data starts at a multiple of 64 bytes, then the raw values.
  std::string header = "{'descr': '<i2', 'fortran_order': False, 'shape': (" + std::to_string(positions) + ", " +
                       std::to_string(layers) + ", " + std::to_string(k) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  const size_t at = file.size();
  file.resize(at + experts.size() * 2);
  for (size_t i = 0; i < experts.size(); ++i) {  // little-endian whatever the host
    const auto v = static_cast<uint16_t>(experts[i]);
    file[at + 2 * i] = static_cast<char>(v & 0xff);
    file[at + 2 * i + 1] = static_cast<char>(v >> 8);
  }
  return base64(file);
}

}  // namespace mlpt::serve
