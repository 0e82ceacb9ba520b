// Text helpers shared by the OpenHands tools: Python-compatible character counting (code points,
// as `len(str)` counts), UTF-8 repair (observations go into JSON), and list formatting as Python
// prints it, because the model-visible messages are built from Python f-strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlpt::openhands {

// Replaces every invalid UTF-8 sequence with U+FFFD (what Python's errors="replace" does).
std::string valid_utf8(std::string_view bytes);
// Number of code points in valid UTF-8.
size_t code_points(std::string_view utf8);
// The byte offset of code point `n` (or size() when past the end).
size_t byte_offset(std::string_view utf8, size_t n);
// "[1, 2, 3]" as Python's str(list) prints a list of ints.
std::string python_list(const std::vector<int64_t>& values);
// Python's str.rstrip() for ASCII whitespace.
std::string_view rstrip(std::string_view s);
// Occurrences of `c`.
size_t count(std::string_view s, char c);

}  // namespace mlpt::openhands
