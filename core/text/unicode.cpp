#include "core/text/unicode.hpp"

#include <algorithm>
#include <vector>

#include "sdk/include/mlpt/sdk/utf8.hpp"

namespace mlpt::text::unicode {
namespace {

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClass* end = kCombiningClasses + kCombiningClassCount;
  auto it = std::lower_bound(kCombiningClasses, end, cp,
                             [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  auto it = std::lower_bound(kDecompositions, end, cp,
                             [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  if (it != end && it->cp == cp) {
    out.insert(out.end(), kDecompositionPool + it->offset, kDecompositionPool + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  uint64_t key = (uint64_t(a) << 21) | b;
  const Composition* end = kCompositions + kCompositionCount;
  auto it = std::lower_bound(kCompositions, end, key,
                             [](const Composition& c, uint64_t v) { return c.pair < v; });
  return it != end && it->pair == key ? it->composite : 0;
}

}  // namespace

// One implementation for the core and the plugins: the SDK's (plugins cannot include the core).
bool is_valid_utf8(std::string_view s) { return sdk::utf8::is_valid(s); }

std::string to_valid_utf8(std::string_view s) { return sdk::utf8::to_valid(s); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool nfc_quick_stable(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {  // below U+0300 nothing changes
      i += static_cast<unsigned char>(s[i]) < 0x80 ? 1 : 2;
      continue;
    }
    if (flags(next_code_point(s, i)) & kNfcUnstable) return false;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (nfc_quick_stable(s)) return std::string(s);
  // Full algorithm: canonical decomposition, canonical ordering, canonical composition.
  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) decompose(next_code_point(s, i), d);
  std::vector<uint8_t> cc(d.size());
  for (size_t k = 0; k < d.size(); ++k) cc[k] = combining_class(d[k]);
  // stable sort of each run of non-starters by class
  for (size_t k = 0; k < d.size();) {
    if (!cc[k]) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < d.size() && cc[e]) ++e;
    for (size_t a = k + 1; a < e; ++a)  // insertion sort: runs are short
      for (size_t b = a; b > k && cc[b - 1] > cc[b]; --b) std::swap(cc[b - 1], cc[b]), std::swap(d[b - 1], d[b]);
    k = e;
  }
  std::vector<uint32_t> out;
  std::vector<uint8_t> occ;
  out.reserve(d.size());
  long starter = -1;  // index in out of the last starter
  for (size_t k = 0; k < d.size(); ++k) {
    uint32_t c = d[k];
    uint8_t ccc = cc[k];
    if (starter >= 0) {
      uint8_t last = out.size() - 1 == size_t(starter) ? 0 : occ.back();
      bool blocked = size_t(starter) != out.size() - 1 && (last == 0 || last >= ccc);
      if (!blocked) {
        if (uint32_t p = compose(out[starter], c)) {
          out[starter] = p;
          continue;
        }
      }
    }
    if (ccc == 0) starter = long(out.size());
    out.push_back(c);
    occ.push_back(ccc);
  }
  std::string r;
  r.reserve(s.size());
  for (uint32_t c : out) append_utf8(r, c);
  return r;
}

}  // namespace mlpt::text::unicode
