// UTF-8 handling and NFC normalisation for the tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/text/unicode_tables.hpp"

namespace mlpt::text::unicode {

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Replaces every ill-formed subsequence by U+FFFD, one per maximal subpart (the Unicode / WHATWG
// practice, which is also what node's Buffer.toString and Rust's from_utf8_lossy do).
std::string to_valid_utf8(std::string_view s);

// Decodes one code point from valid UTF-8 at s[i], advancing i.
inline uint32_t next_code_point(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return ++i, b;
  if (b < 0xE0) {
    uint32_t cp = (uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    return i += 2, cp;
  }
  if (b < 0xF0) {
    uint32_t cp = (uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    return i += 3, cp;
  }
  uint32_t cp = (uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
  return i += 4, cp;
}

void append_utf8(std::string& out, uint32_t cp);

// NFC of valid UTF-8. Returns the input unchanged (cheaply) when no character can change.
std::string nfc(std::string_view s);
// True when nfc(s) == s is certain without normalising (every character is NFC-stable).
bool nfc_quick_stable(std::string_view s);

}  // namespace mlpt::text::unicode
