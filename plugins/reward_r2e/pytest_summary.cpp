#include "pytest_summary.hpp"

namespace mlpt::r2e {

std::string strip_ansi(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') continue;
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      // CSI: parameters 0x30-0x3F, intermediates 0x20-0x2F, one final byte 0x40-0x7E.
      size_t j = i + 2;
      while (j < s.size() && s[j] >= 0x30 && s[j] <= 0x3F) ++j;
      while (j < s.size() && s[j] >= 0x20 && s[j] <= 0x2F) ++j;
      if (j < s.size() && s[j] >= 0x40 && s[j] <= 0x7E) {
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::map<std::string, std::string> parse_pytest_summary(const std::string& output) {
  std::map<std::string, std::string> result;
  const std::string text = strip_ansi(output);
  size_t at = text.find("short test summary info");
  if (at == std::string::npos) return result;
  size_t line_start = text.find('\n', at);
  while (line_start != std::string::npos && line_start < text.size()) {
    size_t begin = line_start + 1;
    size_t end = text.find('\n', begin);
    std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    line_start = end;
    size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string status = line.substr(0, sp);
    if (status != "PASSED" && status != "FAILED" && status != "ERROR") continue;
    std::string rest = line.substr(sp + 1);
    if (size_t cut = rest.find(" - "); cut != std::string::npos) rest.resize(cut);
    size_t b = rest.find_first_not_of(" \t"), e = rest.find_last_not_of(" \t");
    rest = b == std::string::npos ? "" : rest.substr(b, e - b + 1);
    std::string name;
    size_t sep = rest.find("::");
    if (sep == std::string::npos) {
      name = rest;
    } else {
      std::string tail = rest.substr(sep + 2);
      for (size_t p; (p = tail.find("::")) != std::string::npos;) tail.replace(p, 2, ".");
      name = tail;
    }
    result[name] = status;
  }
  return result;
}

}  // namespace mlpt::r2e
