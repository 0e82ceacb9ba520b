#include "routed_experts_npy.hpp"

#include <regex>

#include <mlpt/sdk.hpp>

namespace mlpt::engine_http {
namespace {

sdk::Error bad(const std::string& what) { return sdk::Error(MLPT_INTERNAL, "engine http: routed_experts: " + what); }

std::string unbase64(const std::string& text) {
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  for (char c : text) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (c == '=') break;
    if (v < 0) throw bad("not base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((have += 6) >= 8) out += static_cast<char>((bits >> (have -= 8)) & 0xff);
  }
  return out;
}

}  // namespace

std::vector<std::vector<int16_t>> routed_experts_from_npy_base64(const std::string& text, size_t positions, size_t layers, size_t k) {
  const std::string npy = unbase64(text);
  if (npy.size() < 10 || npy.compare(0, 6, "\x93NUMPY") != 0) throw bad("not a .npy array");
  const int major = static_cast<unsigned char>(npy[6]);
  const size_t length_bytes = major == 1 ? 2 : 4;
  size_t header_size = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_size |= static_cast<size_t>(static_cast<unsigned char>(npy[8 + i])) << (8 * i);
  const size_t data_at = 8 + length_bytes + header_size;
  if (data_at > npy.size()) throw bad(".npy header runs past the end");
  const std::string header = npy.substr(8 + length_bytes, header_size);
  std::smatch descr, shape;
  if (!std::regex_search(header, descr, std::regex("'descr':\\s*'([<|>]?)([uif])([1248])'")) ||
      !std::regex_search(header, shape, std::regex("'shape':\\s*\\((\\d+),\\s*(\\d+),\\s*(\\d+),?\\)")))
    throw bad(".npy header " + header + " is not a 3-d integer array");
  if (header.find("'fortran_order': True") != std::string::npos) throw bad("Fortran-ordered array");
  if (descr[1] == ">" || descr[2] == "f") throw bad("dtype " + descr[0].str() + " (expected little-endian integers)");
  const bool is_signed = descr[2] == "i";
  const size_t width = std::stoul(descr[3]);
  const size_t have = std::stoul(shape[1]), got_layers = std::stoul(shape[2]), got_k = std::stoul(shape[3]);
  if (got_layers != layers || got_k != k)
    throw bad("shape (" + shape[1].str() + ", " + shape[2].str() + ", " + shape[3].str() + ") for a model of " + std::to_string(layers) +
              " MoE layers and top-" + std::to_string(k));
  if (have > positions) throw bad(std::to_string(have) + " positions, more than the " + std::to_string(positions) + " asked for");
  if (npy.size() - data_at < have * layers * k * width) throw bad("the array data is shorter than its shape");
  std::vector<std::vector<int16_t>> out(layers, std::vector<int16_t>(positions * k, int16_t(-1)));
  const auto* data = reinterpret_cast<const unsigned char*>(npy.data() + data_at);
  for (size_t p = 0; p < have; ++p)
    for (size_t l = 0; l < layers; ++l)
      for (size_t j = 0; j < k; ++j) {
        const unsigned char* at = data + ((p * layers + l) * k + j) * width;
        uint64_t v = 0;
        for (size_t b = 0; b < width; ++b) v |= static_cast<uint64_t>(at[b]) << (8 * b);
        int64_t value = static_cast<int64_t>(v);
        if (is_signed && width < 8 && (v >> (8 * width - 1)) & 1) value -= int64_t(1) << (8 * width);
        out[l][p * k + j] = static_cast<int16_t>(value);
      }
  return out;
}

}  // namespace mlpt::engine_http
