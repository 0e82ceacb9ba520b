#include "refit_manifest.hpp"

#include <cstring>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sparse_refit {
namespace {

constexpr char kMagic[4] = {'M', 'L', 'R', 'F'};
constexpr size_t kHeader = 4 + 4 + 3 * 8;

void put_u64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

std::vector<std::byte> encode_manifest(const RefitManifest& m) {
  std::vector<std::byte> out;
  out.reserve(kHeader + 8 * m.hashes.size());
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  out.push_back(static_cast<std::byte>(m.kind));
  out.insert(out.end(), 3, std::byte{0});
  put_u64(out, m.base_version);
  put_u64(out, m.version);
  put_u64(out, m.hashes.size());
  for (uint64_t h : m.hashes) put_u64(out, h);
  return out;
}

RefitManifest decode_manifest(const std::byte* data, size_t size) {
  auto bad = [](const std::string& why) { return sdk::Error(MLPT_DATA_LOSS, "refit manifest: " + why); };
  if (size < kHeader || std::memcmp(data, kMagic, 4) != 0)
    throw bad("not a refit manifest (bad magic or shorter than its header)");
  RefitManifest m;
  const auto kind = static_cast<uint8_t>(data[4]);
  if (kind < 1 || kind > 3) throw bad("unknown kind " + std::to_string(kind));
  m.kind = static_cast<RefitManifest::Kind>(kind);
  m.base_version = get_u64(data + 8);
  m.version = get_u64(data + 16);
  const uint64_t count = get_u64(data + 24);
  if (count > (size - kHeader) / 8 || size != kHeader + 8 * count)
    throw bad(std::to_string(count) + " hashes do not fill a " + std::to_string(size) + "-byte manifest");
  m.hashes.resize(count);
  for (uint64_t i = 0; i < count; ++i) m.hashes[i] = get_u64(data + kHeader + 8 * i);
  return m;
}

}  // namespace mlpt::sparse_refit
