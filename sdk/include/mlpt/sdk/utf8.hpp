// UTF-8 checking and repair: the one implementation the core (core/text) and plugins share.
// Well-formed means the Unicode standard's table 3-7: no overlongs, no surrogates, nothing above
// U+10FFFF, so lead bytes 0xC0, 0xC1 and 0xF5..0xFF never start a character. Repair replaces each
// maximal ill-formed subpart by one U+FFFD (the Unicode / WHATWG practice, also Python's
// errors="replace"); nothing throws.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mlpt::sdk::utf8 {

// Length of the well-formed sequence at s[i] (1..4), or 0 with `bad` = the length of the maximal
// ill-formed subpart there (at least 1). Requires i < s.size().
inline size_t sequence_length(std::string_view s, size_t i, size_t& bad) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = at(i);
  bad = 1;
  if (b < 0x80) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  size_t len;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // a continuation byte, 0xC0/0xC1 or 0xF5..0xFF
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return bad = k, 0;
    const unsigned char c = at(i + k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return bad = k, 0;
  }
  return len;
}

inline bool is_valid(std::string_view s) {
  size_t bad;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s, i, bad);
    if (!len) return false;
    i += len;
  }
  return true;
}

// `s` with every maximal ill-formed subpart replaced by U+FFFD.
inline std::string to_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t bad;
  for (size_t i = 0; i < s.size();) {
    const size_t len = sequence_length(s, i, bad);
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

}  // namespace mlpt::sdk::utf8
