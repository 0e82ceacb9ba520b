#include "core/text/unicode.hpp"

#include <algorithm>
#include <vector>

namespace mlpt::text::unicode {
namespace {

// Length of the well-formed sequence starting at s[i], or 0 with `bad` = length of the maximal
// subpart to replace (at least 1).
size_t sequence_length(std::string_view s, size_t i, size_t& bad) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b = at(i);
  size_t n = s.size();
  bad = 1;
  if (b < 0x80) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  size_t len;
  if (b >= 0xC2 && b <= 0xDF) len = 2;
  else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n) return bad = k, 0;
    unsigned char c = at(i + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return bad = k, 0;
  }
  return len;
}

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

bool is_valid_utf8(std::string_view s) {
  size_t i = 0, bad;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = sequence_length(s, i, bad);
    if (!len) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad;
  while (i < s.size()) {
    size_t len = sequence_length(s, i, bad);
    if (len) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

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
