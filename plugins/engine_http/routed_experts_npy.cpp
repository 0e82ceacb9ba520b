#include "routed_experts_npy.hpp"

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

// The .npy header is the server's bytes: linear scans, no backtracking regex (whose recursion a
// long header overflows).
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The first "'descr': '<byteorder?><kind><width>'" (byte order one of <|>, kind one of u i f, width
// one of 1 2 4 8): false when there is none.
bool find_descr(const std::string& h, std::string& order, char& kind, size_t& width, std::string& text) {
  for (size_t at = h.find("'descr':"); at != std::string::npos; at = h.find("'descr':", at + 1)) {
    size_t i = at + 8;
    while (i < h.size() && is_space(h[i])) ++i;
    if (i >= h.size() || h[i] != '\'') continue;
    const size_t start = ++i;
    std::string o;
    if (i < h.size() && (h[i] == '<' || h[i] == '|' || h[i] == '>')) o = h[i++];
    if (i + 2 > h.size() || std::string("uif").find(h[i]) == std::string::npos ||
        std::string("1248").find(h[i + 1]) == std::string::npos || i + 2 >= h.size() || h[i + 2] != '\'')
      continue;
    order = o, kind = h[i], width = size_t(h[i + 1] - '0'), text = h.substr(start, i + 2 - start);
    return true;
  }
  return false;
}

// The first "'shape': (a, b, c)" (a trailing comma allowed): false when there is none.
bool find_shape(const std::string& h, std::string dims[3]) {
  for (size_t at = h.find("'shape':"); at != std::string::npos; at = h.find("'shape':", at + 1)) {
    size_t i = at + 8;
    while (i < h.size() && is_space(h[i])) ++i;
    if (i >= h.size() || h[i] != '(') continue;
    ++i;
    bool ok = true;
    for (int d = 0; d < 3 && ok; ++d) {
      if (d > 0)
        while (i < h.size() && is_space(h[i])) ++i;
      const size_t start = i;
      while (i < h.size() && h[i] >= '0' && h[i] <= '9') ++i;
      dims[d] = h.substr(start, i - start);
      ok = !dims[d].empty() && dims[d].size() <= 18 && (d == 2 || (i < h.size() && h[i++] == ','));
    }
    if (!ok) continue;
    if (i < h.size() && h[i] == ',') ++i;
    if (i < h.size() && h[i] == ')') return true;
  }
  return false;
}

}  // namespace

std::vector<std::vector<int16_t>> routed_experts_from_npy_base64(const std::string& text, size_t positions, size_t layers, size_t k) {
  const std::string npy = unbase64(text);
  if (npy.size() < 10 || npy.compare(0, 6, "\x93NUMPY") != 0) throw bad("not a .npy array");
  const int major = static_cast<unsigned char>(npy[6]);
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (npy.size() < 8 + length_bytes) throw bad("not a .npy array (its header length is cut off)");
  size_t header_size = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_size |= static_cast<size_t>(static_cast<unsigned char>(npy[8 + i])) << (8 * i);
  const size_t data_at = 8 + length_bytes + header_size;
  if (data_at > npy.size()) throw bad(".npy header runs past the end");
  const std::string header = npy.substr(8 + length_bytes, header_size);
  std::string order, descr, shape[3];
  char kind = 0;
  size_t width = 0;
  if (!find_descr(header, order, kind, width, descr) || !find_shape(header, shape))
    throw bad(".npy header " + header.substr(0, 200) + (header.size() > 200 ? "..." : "") + " is not a 3-d integer array");
  if (header.find("'fortran_order': True") != std::string::npos) throw bad("Fortran-ordered array");
  if (order == ">" || kind == 'f') throw bad("dtype " + descr + " (expected little-endian integers)");
  const bool is_signed = kind == 'i';
  const size_t have = std::stoul(shape[0]), got_layers = std::stoul(shape[1]), got_k = std::stoul(shape[2]);
  if (got_layers != layers || got_k != k)
    throw bad("shape (" + shape[0] + ", " + shape[1] + ", " + shape[2] + ") for a model of " + std::to_string(layers) +
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
