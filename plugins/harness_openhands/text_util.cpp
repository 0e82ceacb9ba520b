#include "text_util.hpp"

#include "mlpt/sdk/utf8.hpp"

namespace mlpt::openhands {

std::string valid_utf8(std::string_view s) { return sdk::utf8::to_valid(s); }

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

size_t byte_offset(std::string_view s, size_t n) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == n) return i;
      ++seen;
    }
  }
  return s.size();
}

std::string python_list(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string_view rstrip(std::string_view s) {
  size_t end = s.find_last_not_of(" \t\n\r\f\v");
  return end == std::string_view::npos ? std::string_view() : s.substr(0, end + 1);
}

size_t count(std::string_view s, char c) {
  size_t n = 0;
  for (char x : s) n += x == c;
  return n;
}

}  // namespace mlpt::openhands
