#include "sparse_delta.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "mlpt/sdk/error.hpp"
#include "streaming_xxhash64.hpp"

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

// Writes v as LEB128. Gaps under 2^14 (nearly all of them in a sparse update) take one or two
// bytes without a branch on which (at 1% changed that branch would be mispredicted half the time):
// two bytes are stored either way, so `at` needs one byte of room past the encoding.
std::byte* put_leb128(std::byte* at, uint64_t v) {
  if (v < (uint64_t{1} << 14)) {
    const uint64_t two = v >> 7 != 0;
    at[0] = static_cast<std::byte>((v & 0x7f) | two << 7);
    at[1] = static_cast<std::byte>(v >> 7);
    return at + 1 + two;
  }
  for (; v >= 0x80; v >>= 7) *at++ = static_cast<std::byte>(0x80 | (v & 0x7f));
  *at++ = static_cast<std::byte>(v);
  return at;
}

// Calls f(i) for each set bit of `mask`, in order.
template <class F>
void for_each_set(const uint64_t* mask, int64_t words, F&& f) {
  for (int64_t w = 0; w < words; ++w)
    for (uint64_t m = mask[w]; m != 0; m &= m - 1) f(w * 64 + __builtin_ctzll(m));
}

// Scratch lent to encodes and applies (change masks, gathered values), kept for the process's life:
// the tensors' threads come and go with each version, and scratch allocated per version would fault
// its pages in every time (the costliest part of a refit on a virtual machine).
template <class T>
class ScratchLease {
 public:
  ScratchLease() {
    std::lock_guard lock(mutex());
    if (!pool().empty()) items_ = std::move(pool().back()), pool().pop_back();
  }
  ~ScratchLease() {
    std::lock_guard lock(mutex());
    pool().push_back(std::move(items_));
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  // At least `count` items (their old contents kept).
  T* reserve(size_t count) {
    if (items_.size() < count) items_.resize(std::max(count, items_.size() + items_.size() / 2));
    return items_.data();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::vector<T>>& pool() {
    static std::vector<std::vector<T>> p;
    return p;
  }
  std::vector<T> items_;
};

// Elements compared and gathered per chunk: 64 KiB of each version, so that the gather and the
// update of the sender's copy find the chunk still in cache (one pass over memory, not two).
int64_t chunk_elements(int width) {
  return std::max<int64_t>(64, (int64_t{1} << 16) / width / 64 * 64);
}

// Past this many changes of n elements of w bytes the dense form is the smallest: no need to gather.
size_t gather_limit(size_t n, size_t w) {
  return n - std::min(n, (n + 7) / 8 / w);
}

// Writes the smallest form of an update of `numel` elements of `width` bytes to `out`: its `k`
// changes are the set bits of `mask` (bits past numel 0), their values gathered in order in `values`
// (nullptr: not gathered, only the dense form can be written). The prefix comes from the mask (LEB128
// gaps or the bitmap itself), then the values, which are the same in both sparse forms; the dense
// form is `next` whole. Values travel in the host's byte order (little-endian on every platform mlpt
// supports).
DeltaStats write_delta(const uint64_t* mask, int64_t numel, int width, size_t k, const std::byte* values,
                       const void* next, std::vector<std::byte>& out) {
  const int64_t words = (numel + 63) / 64;
  const size_t n = static_cast<size_t>(numel), w = static_cast<size_t>(width);
  const size_t dense = w * n;
  DeltaStats s;
  s.numel = numel;
  s.changed = static_cast<int64_t>(k);
  const bool gathered = values != nullptr || k == 0;
  const size_t bitmap = (n + 7) / 8 + w * k;
  // Indices cost at least a byte and a value per change: past n / 8 changes the bitmap is smaller.
  // Below, the gaps are written once, into scratch, and copied if that form wins.
  ScratchLease<std::byte> index_lease;
  size_t index_bytes = 0;
  if (gathered && k <= n / 8) {
    std::byte* const start = index_lease.reserve(10 * k + 1);  // at most 10 bytes a gap, and the spare
    std::byte* at = start;
    int64_t last = -1;
    for_each_set(mask, words,
                 [&](int64_t i) { at = put_leb128(at, static_cast<uint64_t>(i - last - 1)), last = i; });
    index_bytes = static_cast<size_t>(at - start);
  }
  const size_t indices = k <= n / 8 ? index_bytes + w * k : SIZE_MAX;
  s.form = gathered && indices <= bitmap && indices < dense ? DeltaForm::indices
           : gathered && bitmap < dense                     ? DeltaForm::bitmap
                                                            : DeltaForm::dense;
  const size_t payload = s.form == DeltaForm::dense ? dense : s.form == DeltaForm::indices ? indices : bitmap;
  const size_t start = out.size();
  out.resize(start + kHeader + payload);
  std::byte* h = out.data() + start;
  std::memcpy(h, kMagic, 4);
  h[4] = static_cast<std::byte>(s.form);
  h[5] = static_cast<std::byte>(width);
  h[6] = h[7] = std::byte{0};
  put_u64(h + 8, static_cast<uint64_t>(numel));
  put_u64(h + 16, static_cast<uint64_t>(s.changed));
  put_u64(h + 24, payload);
  std::byte* p = h + kHeader;
  if (s.form == DeltaForm::dense) {
    if (n) std::memcpy(p, next, dense);
  } else {
    if (s.form == DeltaForm::indices) {
      std::memcpy(p, index_lease.reserve(0), index_bytes);
      p += index_bytes;
    } else {
      // The mask's bytes are the bitmap (little-endian words; bits past numel are 0).
      std::memcpy(p, mask, (n + 7) / 8);
      p += (n + 7) / 8;
    }
    if (k) std::memcpy(p, values, k * w);
  }
  s.bytes = out.size() - start;
  return s;
}

// One pass, chunk by chunk: compare base and next into a change mask (vectorised), gather the
// changed values and, with `update`, write them into base; with `checksum`, hash next's chunk while
// it is in cache (the manifest's checksum without a second read of the tensor). Then the smallest
// form is written.
DeltaStats encode(SimdPath path, void* base, const void* next, int64_t numel, int width, bool update,
                  std::vector<std::byte>& out, uint64_t* checksum) {
  const int64_t words = (numel + 63) / 64;
  ScratchLease<uint64_t> mask_lease;
  ScratchLease<std::byte> values_lease;
  uint64_t* mask = mask_lease.reserve(static_cast<size_t>(words));
  const size_t n = static_cast<size_t>(numel), w = static_cast<size_t>(width);
  const size_t dense_from = gather_limit(n, w);  // gathering stops there
  const int64_t chunk = chunk_elements(width);
  size_t k = 0;
  bool gathering = true;
  StreamingXxhash64 hash;
  for (int64_t first = 0; first < numel; first += chunk) {
    const int64_t count = std::min(chunk, numel - first);
    const auto* b = static_cast<const std::byte*>(base) + first * width;
    const auto* x = static_cast<const std::byte*>(next) + first * width;
    const auto changed = static_cast<size_t>(diff_mask(path, b, x, count, width, mask + first / 64));
    if (checksum) hash.update(x, static_cast<size_t>(count) * w);
    gathering = gathering && k + changed < dense_from;
    if (gathering && changed > 0) {
      std::byte* values = values_lease.reserve((k + changed) * w) + k * w;
      gather_changed(path, mask + first / 64, count, width, x, values,
                     update ? static_cast<std::byte*>(base) + first * width : nullptr);
    }
    k += changed;
  }
  if (checksum) *checksum = hash.digest();
  const DeltaStats s =
      write_delta(mask, numel, width, k, gathering ? values_lease.reserve(0) : nullptr, next, out);
  if (s.form == DeltaForm::dense && update && n && k)
    std::memcpy(base, next, w * n);  // gathering (and updating) may have stopped
  return s;
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
                        std::vector<std::byte>& out, SimdPath path, uint64_t* next_checksum) {
  // Not updated: prev is only read.
  return encode(path, const_cast<void*>(prev), next, numel, element_bytes, false, out, next_checksum);
}

DeltaStats encode_marked(const uint64_t* changes, const void* next, int64_t numel, int element_bytes,
                         std::vector<std::byte>& out, SimdPath path) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 && element_bytes != 8)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "sparse delta: elements of " + std::to_string(element_bytes) + " bytes (1, 2, 4 or 8)");
  const int64_t words = (numel + 63) / 64, whole = numel / 64;
  // The writer's mask is read as it is, but for its last word, whose bits past numel are cleared here
  // (they would name elements outside the tensor).
  uint64_t tail = 0;
  if (numel % 64 != 0) tail = changes[whole] & ((uint64_t{1} << (numel % 64)) - 1);
  size_t k = 0;
  for (int64_t w = 0; w < whole; ++w) k += static_cast<size_t>(__builtin_popcountll(changes[w]));
  const size_t head = k;
  k += static_cast<size_t>(__builtin_popcountll(tail));
  const size_t w = static_cast<size_t>(element_bytes);
  if (k >= gather_limit(static_cast<size_t>(numel), w))  // nearly all marked: sent whole (dense form)
    return write_delta(changes, numel, element_bytes, k, nullptr, next, out);
  ScratchLease<std::byte> values_lease;
  ScratchLease<uint64_t> mask_lease;
  std::byte* values = values_lease.reserve(std::max<size_t>(k * w, 1));
  gather_changed(path, changes, whole * 64, element_bytes, next, values, nullptr);
  if (tail)
    gather_changed(path, &tail, numel % 64, element_bytes,
                   static_cast<const std::byte*>(next) + whole * 64 * w, values + head * w, nullptr);
  if (numel % 64 == 0) return write_delta(changes, numel, element_bytes, k, values, next, out);
  // The bitmap form copies the mask's bytes: with the last word cleared past numel.
  uint64_t* mask = mask_lease.reserve(static_cast<size_t>(words));
  std::memcpy(mask, changes, static_cast<size_t>(whole) * 8);
  mask[whole] = tail;
  return write_delta(mask, numel, element_bytes, k, values, next, out);
}

DeltaStats encode_delta_and_update(void* base, const void* next, int64_t numel, int element_bytes,
                                   std::vector<std::byte>& out, SimdPath path, uint64_t* next_checksum) {
  return encode(path, base, next, numel, element_bytes, true, out, next_checksum);
}

void apply_delta(const std::byte* data, size_t size, void* values, int64_t numel, int element_bytes,
                 const std::string& tensor, SimdPath path) {
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
  // Decode the positions into a change mask first, so a malformed message changes nothing.
  const int64_t words = static_cast<int64_t>((n + 63) / 64);
  ScratchLease<uint64_t> lease;
  uint64_t* mask = lease.reserve(static_cast<size_t>(words));
  const std::byte* vals = nullptr;
  if (form == DeltaForm::indices) {
    if (payload < width * k) throw bad("index payload too short for its values");
    std::fill(mask, mask + words, 0);
    const std::byte* end = p + payload - width * k;
    uint64_t pos = 0;
    for (uint64_t j = 0; j < k; ++j) {
      uint64_t gap = 0;
      const uint64_t b0 = p + 1 < end ? static_cast<uint8_t>(p[0]) : 0x80,
                     b1 = p + 1 < end ? static_cast<uint8_t>(p[1]) : 0x80;
      if ((b0 & b1 & 0x80) == 0) {
        // One or two bytes (nearly every gap), without a branch on which.
        const uint64_t two = b0 >> 7;
        gap = (b0 & 0x7f) | (two * b1) << 7;
        p += 1 + two;
      } else {
        int shift = 0;
        for (;;) {
          if (p == end || shift > 63) throw bad("index list truncated or overlong");
          uint8_t b = static_cast<uint8_t>(*p++);
          gap |= static_cast<uint64_t>(b & 0x7f) << shift;
          shift += 7;
          if (!(b & 0x80)) break;
        }
      }
      // Positions strictly increase: the first is its gap, each next one past the last.
      const uint64_t next_pos = j == 0 ? gap : pos + 1 + gap;
      if (next_pos >= n || (j > 0 && next_pos <= pos))
        throw bad("index " + std::to_string(next_pos) + " outside " + std::to_string(n) + " elements");
      pos = next_pos;
      mask[pos / 64] |= uint64_t{1} << (pos % 64);
    }
    if (p != end) throw bad("bytes left over after " + std::to_string(k) + " indices");
    vals = p;
  } else if (form == DeltaForm::bitmap) {
    if (payload != (n + 7) / 8 + width * k)
      throw bad("bitmap payload size does not match " + std::to_string(k) + " changes");
    if (words > 0) {
      mask[words - 1] = 0;
      std::memcpy(mask, p, (n + 7) / 8);
      if (n % 64 != 0) mask[words - 1] &= (uint64_t{1} << (n % 64)) - 1;  // padding bits of the last byte
    }
    uint64_t marked = 0;
    for (int64_t w = 0; w < words; ++w) marked += static_cast<uint64_t>(__builtin_popcountll(mask[w]));
    if (marked != k)
      throw bad("bitmap marks " + std::to_string(marked) + " changes, the header says " + std::to_string(k));
    vals = p + (n + 7) / 8;
  } else {
    throw bad("unknown form " + std::to_string(static_cast<int>(form)));
  }
  scatter_changed(path, mask, static_cast<int64_t>(n), element_bytes, vals, out);
}

}  // namespace mlpt::sparse_refit
