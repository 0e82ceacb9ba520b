#include "sparse_delta.hpp"

#include <algorithm>
#include <cstring>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sparse_refit {

namespace {

constexpr char kMagic[4] = {'M', 'L', 'S', 'D'};
constexpr size_t kHeader = 4 + 4 + 3 * 8;

void put_u64(std::byte* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}

uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

size_t leb128_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// The positions where base and next differ, in order, into `at`; with `update`, base takes next's
// value there (so that afterwards it equals next, having written only what changed). Compares 64
// bytes at a time (one vector compare): at a training step's changed fractions most blocks are
// equal and are skipped whole.
template <class T>
void collect_changes(T* base, const T* next, int64_t numel, bool update, std::vector<int64_t>& at) {
  constexpr int64_t per_block = 64 / sizeof(T), per_word = 8 / sizeof(T);
  int64_t i = 0;
  for (; i + per_block <= numel; i += per_block) {
    uint64_t diff = 0;
    for (int64_t w = 0; w < per_block; w += per_word) {
      uint64_t a, b;
      std::memcpy(&a, base + i + w, 8);
      std::memcpy(&b, next + i + w, 8);
      diff |= a ^ b;
    }
    if (diff == 0) continue;
    // A changed block: its words again, and in a changed word the lanes whose bits differ.
    for (int64_t w = 0; w < per_block; w += per_word) {
      uint64_t a, b;
      std::memcpy(&a, base + i + w, 8);
      std::memcpy(&b, next + i + w, 8);
      for (uint64_t x = a ^ b; x != 0;) {
        const int64_t lane = __builtin_ctzll(x) / (8 * static_cast<int>(sizeof(T)));
        const int64_t j = i + w + lane;
        at.push_back(j);
        if (update) base[j] = next[j];
        x &= lane + 1 < per_word ? ~0ull << (8 * sizeof(T) * static_cast<size_t>(lane + 1)) : 0;
      }
    }
  }
  for (; i < numel; ++i)
    if (base[i] != next[i]) {
      at.push_back(i);
      if (update) base[i] = next[i];
    }
}

// Values travel in the host's byte order (little-endian on every platform mlpt supports).
template <class T>
DeltaStats encode(T* base, const T* next, int64_t numel, bool update, std::vector<std::byte>& out) {
  constexpr size_t width = sizeof(T);
  thread_local std::vector<int64_t> at;
  at.clear();
  collect_changes(base, next, numel, update, at);
  DeltaStats s;
  s.numel = numel;
  s.changed = static_cast<int64_t>(at.size());
  size_t index_bytes = 0;
  int64_t last = -1;
  for (int64_t i : at) index_bytes += leb128_size(static_cast<uint64_t>(i - last - 1)), last = i;
  const size_t n = static_cast<size_t>(numel), k = at.size();
  const size_t dense = width * n, indices = index_bytes + width * k, bitmap = (n + 7) / 8 + width * k;
  s.form = indices <= bitmap && indices < dense ? DeltaForm::indices
           : bitmap < dense                     ? DeltaForm::bitmap
                                                : DeltaForm::dense;
  const size_t payload = s.form == DeltaForm::dense ? dense : s.form == DeltaForm::indices ? indices : bitmap;
  const size_t start = out.size();
  // Header and payload are written in place into their exact size (zeroed: the bitmap starts empty).
  out.resize(start + kHeader + payload);
  std::byte* h = out.data() + start;
  std::memcpy(h, kMagic, 4);
  h[4] = static_cast<std::byte>(s.form);
  h[5] = static_cast<std::byte>(width);
  put_u64(h + 8, static_cast<uint64_t>(numel));
  put_u64(h + 16, static_cast<uint64_t>(s.changed));
  put_u64(h + 24, payload);
  std::byte* p = h + kHeader;
  if (s.form == DeltaForm::dense) {
    if (n) std::memcpy(p, next, dense);
  } else if (s.form == DeltaForm::indices) {
    std::byte* gaps = p;
    std::byte* vals = p + index_bytes;
    last = -1;
    for (int64_t i : at) {
      uint64_t gap = static_cast<uint64_t>(i - last - 1);
      while (gap >= 0x80) {
        *gaps++ = static_cast<std::byte>(0x80 | (gap & 0x7f));
        gap >>= 7;
      }
      *gaps++ = static_cast<std::byte>(gap);
      std::memcpy(vals, next + i, width);
      vals += width;
      last = i;
    }
  } else {
    std::byte* vals = p + (n + 7) / 8;
    for (int64_t i : at) {
      p[i / 8] |= static_cast<std::byte>(1u << (i % 8));
      std::memcpy(vals, next + i, width);
      vals += width;
    }
  }
  s.bytes = out.size() - start;
  return s;
}

template <class F>
DeltaStats by_width(int element_bytes, F&& f) {
  switch (element_bytes) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  throw sdk::Error(MLPT_INVALID_ARGUMENT, "sparse refit: elements of " + std::to_string(element_bytes) +
                                              " bytes (1, 2, 4 or 8 supported)");
}

}  // namespace

const char* form_name(DeltaForm f) {
  switch (f) {
    case DeltaForm::dense:
      return "dense";
    case DeltaForm::indices:
      return "indices";
    case DeltaForm::bitmap:
      return "bitmap";
  }
  return "?";
}

DeltaStats encode_delta(const void* prev, const void* next, int64_t numel, int element_bytes,
                        std::vector<std::byte>& out) {
  return by_width(element_bytes, [&](auto zero) {
    using T = decltype(zero);
    // Not updated: prev is only read.
    return encode(const_cast<T*>(static_cast<const T*>(prev)), static_cast<const T*>(next), numel, false,
                  out);
  });
}

DeltaStats encode_delta_and_update(void* base, const void* next, int64_t numel, int element_bytes,
                                   std::vector<std::byte>& out) {
  return by_width(element_bytes, [&](auto zero) {
    using T = decltype(zero);
    return encode(static_cast<T*>(base), static_cast<const T*>(next), numel, true, out);
  });
}

void apply_delta(const std::byte* data, size_t size, void* values, int64_t numel, int element_bytes,
                 const std::string& tensor) {
  auto bad = [&](const std::string& why) {
    return sdk::Error(MLPT_DATA_LOSS, "sparse refit of '" + tensor + "': " + why);
  };
  if (size < kHeader || std::memcmp(data, kMagic, 4) != 0)
    throw bad("not a sparse delta (bad magic or shorter than its header)");
  const auto form = static_cast<DeltaForm>(data[4]);
  const uint64_t width = static_cast<uint8_t>(data[5]);
  const uint64_t n = get_u64(data + 8), k = get_u64(data + 16), payload = get_u64(data + 24);
  if (width != static_cast<uint64_t>(element_bytes))
    throw bad("encodes elements of " + std::to_string(width) + " bytes, the tensor's have " +
              std::to_string(element_bytes));
  if (n != static_cast<uint64_t>(numel))
    throw bad("encodes " + std::to_string(n) + " elements, the tensor has " + std::to_string(numel));
  if (payload != size - kHeader)
    throw bad("payload of " + std::to_string(payload) + " bytes in a " + std::to_string(size) +
              "-byte message");
  if (k > n) throw bad(std::to_string(k) + " changes in " + std::to_string(n) + " elements");
  const std::byte* p = data + kHeader;
  auto* out = static_cast<std::byte*>(values);
  if (form == DeltaForm::dense) {
    if (payload != width * n)
      throw bad("dense payload is not " + std::to_string(width) + " bytes per element");
    if (n) std::memcpy(out, p, payload);
    return;
  }
  // Decode the positions first, so a malformed message changes nothing.
  std::vector<uint64_t> at;
  at.reserve(k);
  const std::byte* vals = nullptr;
  if (form == DeltaForm::indices) {
    if (payload < width * k) throw bad("index payload too short for its values");
    const std::byte* end = p + payload - width * k;
    uint64_t pos = 0;
    bool first = true;
    while (at.size() < k) {
      uint64_t gap = 0;
      int shift = 0;
      for (;;) {
        if (p == end || shift > 63) throw bad("index list truncated or overlong");
        uint8_t b = static_cast<uint8_t>(*p++);
        gap |= static_cast<uint64_t>(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
      }
      pos = first ? gap : pos + 1 + gap;
      first = false;
      if (pos >= n) throw bad("index " + std::to_string(pos) + " outside " + std::to_string(n) + " elements");
      at.push_back(pos);
    }
    if (p != end) throw bad("bytes left over after " + std::to_string(k) + " indices");
    vals = p;
  } else if (form == DeltaForm::bitmap) {
    if (payload != (n + 7) / 8 + width * k)
      throw bad("bitmap payload size does not match " + std::to_string(k) + " changes");
    // Eight bytes of the bitmap at a time: words without a change are skipped whole.
    for (uint64_t byte = 0; byte < (n + 7) / 8; byte += 8) {
      uint64_t word = 0;
      std::memcpy(&word, p + byte, std::min<uint64_t>(8, (n + 7) / 8 - byte));
      for (; word != 0; word &= word - 1) {
        const uint64_t i = byte * 8 + static_cast<uint64_t>(__builtin_ctzll(word));
        if (i >= n) break;  // padding bits of the last byte
        at.push_back(i);
      }
    }
    if (at.size() != k)
      throw bad("bitmap marks " + std::to_string(at.size()) + " changes, the header says " +
                std::to_string(k));
    vals = p + (n + 7) / 8;
  } else {
    throw bad("unknown form " + std::to_string(static_cast<int>(form)));
  }
  for (size_t j = 0; j < at.size(); ++j) std::memcpy(out + at[j] * width, vals + width * j, width);
}

}  // namespace mlpt::sparse_refit
