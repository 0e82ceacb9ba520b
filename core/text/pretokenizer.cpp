#include "core/text/pretokenizer.hpp"

#include <cstdint>

#include "core/text/unicode.hpp"

namespace mlpt::text {

const std::string_view kQwen3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string_view kQwen35SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using unicode::flags;

// Classes as the regex sees them. "Letter" is \p{L} (Qwen3) or [\p{L}\p{M}] (Qwen3.5).
enum Cls : uint8_t { kOther, kLetter, kNumber, kSpace, kNewline };

// ASCII classes precomputed; everything else from the Unicode table.
struct AsciiTable {
  uint8_t cls[128];
  constexpr AsciiTable() : cls() {
    for (int c = 0; c < 128; ++c) {
      uint8_t k = kOther;
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = kLetter;
      else if (c >= '0' && c <= '9') k = kNumber;
      else if (c == '\r' || c == '\n') k = kNewline;
      else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = kSpace;
      cls[c] = k;
    }
  }
};
constexpr AsciiTable kAscii;

template <bool kMarksAreLetters>
struct Scanner {
  std::string_view s;
  size_t n;

  // Class of the character at i; sets `next` to the index after it.
  uint8_t cls(size_t i, size_t& next) const {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return next = i + 1, kAscii.cls[b];
    size_t j = i;
    uint32_t cp = unicode::next_code_point(s, j);
    next = j;
    uint8_t f = flags(cp);
    if (f & unicode::kLetter) return kLetter;
    if (kMarksAreLetters && (f & unicode::kMark)) return kLetter;
    if (f & unicode::kNumber) return kNumber;
    if (f & unicode::kWhiteSpace) return kSpace;
    return kOther;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\''); returns the end or 0. Case-insensitive
  // matching follows Unicode simple case folding, so U+017F (long s) matches 's' as well.
  size_t contraction(size_t i) const {
    // (c | 0x20) == 'x' holds exactly for 'x' and 'X' when 'x' is a lowercase ASCII letter.
    auto is = [&](size_t k, char x) { return k < n && (s[k] | 0x20) == x; };
    if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return i + 2;
    if ((is(i + 1, 'r') && is(i + 2, 'e')) || (is(i + 1, 'v') && is(i + 2, 'e')) ||
        (is(i + 1, 'l') && is(i + 2, 'l')))
      return i + 3;
    if (i + 2 < n && static_cast<unsigned char>(s[i + 1]) == 0xC5 &&
        static_cast<unsigned char>(s[i + 2]) == 0xBF)  // U+017F LATIN SMALL LETTER LONG S
      return i + 3;
    return 0;
  }

  size_t letters_from(size_t i) const {
    size_t next;
    while (i < n && cls(i, next) == kLetter) i = next;
    return i;
  }

  // One match starting at i (i < n); returns its end.
  size_t match(size_t i) const {
    size_t next;
    uint8_t c = cls(i, next);
    if (s[i] == '\'') {
      if (size_t e = contraction(i)) return e;
    }
    switch (c) {
      case kLetter:
        return letters_from(next);
      case kNumber:
        return next;
      case kOther: {
        // [^\r\n\p{L}\p{N}]?\p{L}+ first, then [^\s\p{L}\p{N}]+[\r\n]*
        size_t n2;
        if (next < n && cls(next, n2) == kLetter) return letters_from(n2);
        size_t e = next;
        while (e < n && cls(e, n2) == kOther) e = n2;
        while (e < n && (s[e] == '\r' || s[e] == '\n')) ++e;
        return e;
      }
      case kSpace:
      case kNewline: {
        size_t n2;
        if (c == kSpace && next < n) {
          uint8_t c2 = cls(next, n2);
          if (c2 == kLetter) return letters_from(n2);  // e.g. " word", "\tword"
          if (s[i] == ' ' && c2 == kOther) {          // " ?[^\s\p{L}\p{N}]+[\r\n]*"
            size_t e = n2;
            while (e < n && cls(e, n2) == kOther) e = n2;
            while (e < n && (s[e] == '\r' || s[e] == '\n')) ++e;
            return e;
          }
        }
        // whitespace run [i, e); remember the last CR/LF in it and where its last character starts
        size_t e = i, last_nl = SIZE_MAX, last_start = i;
        while (e < n) {
          uint8_t k = cls(e, n2);
          if (k != kSpace && k != kNewline) break;
          if (k == kNewline) last_nl = e;
          last_start = e;
          e = n2;
        }
        if (last_nl != SIZE_MAX) return last_nl + 1;  // \s*[\r\n]+
        if (e == n) return e;                          // \s+(?!\S) at the end
        if (last_start > i) return last_start;         // \s+(?!\S): leave one for the next word
        return e;                                      // \s+
      }
    }
    return next;
  }

  void run(std::vector<std::string_view>& out) const {
    for (size_t i = 0; i < n;) {
      size_t e = match(i);
      out.push_back(s.substr(i, e - i));
      i = e;
    }
  }
};

}  // namespace

void pre_tokenize(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& out) {
  if (pattern == SplitPattern::kQwen35) Scanner<true>{text, text.size()}.run(out);
  else Scanner<false>{text, text.size()}.run(out);
}

}  // namespace mlpt::text
