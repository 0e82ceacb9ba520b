#include "pytest_summary.hpp"

#include <cstdlib>
#include <regex>
#include <vector>

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
      name = "";  // R2E's parse_log_pytest: the parts after the first "::", joined (none here)
    } else {
      std::string tail = rest.substr(sep + 2);
      for (size_t p; (p = tail.find("::")) != std::string::npos;) tail.replace(p, 2, ".");
      name = tail;
    }
    result[name] = status;
  }
  return result;
}

TrustedSummary trusted_summary(const std::string& output, int exit_code) {
  TrustedSummary t;
  const std::string text = strip_ansi(output);
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  while (!lines.empty() && lines.back().find_first_not_of(" \t") == std::string::npos) lines.pop_back();
  static const std::regex header("^=+ short test summary info =+$");
  static const std::regex final_line("^=+ (.+) in [0-9.]+s( \\([0-9:]+\\))? =+$");
  size_t at = std::string::npos, headers = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("short test summary info") != std::string::npos && std::regex_match(lines[i], header)) ++headers, at = i;
  if (headers != 1) return t.why = std::to_string(headers) + " test summary blocks in the output (expected exactly 1)", t;
  std::smatch m;
  if (lines.empty() || !std::regex_match(lines.back(), m, final_line))
    return t.why = "the output does not end with pytest's final summary line", t;
  // The counts on the final line, e.g. "5 failed, 3 passed, 1 error".
  std::map<std::string, long> counted;
  static const std::regex count("([0-9]+) ([a-z]+)");
  const std::string counts = m[1].str();
  for (auto it = std::sregex_iterator(counts.begin(), counts.end(), count); it != std::sregex_iterator(); ++it) {
    std::string word = (*it)[2].str();
    if (word == "errors") word = "error";
    counted[word] += std::atol((*it)[1].str().c_str());
  }
  std::map<std::string, long> listed;
  for (size_t i = at + 1; i + 1 < lines.size(); ++i) {
    const std::string& l = lines[i];
    const std::string status = l.substr(0, l.find(' '));
    static const std::map<std::string, std::string> word = {{"PASSED", "passed"}, {"FAILED", "failed"}, {"ERROR", "error"},
                                                            {"SKIPPED", "skipped"}, {"XFAIL", "xfailed"}, {"XPASS", "xpassed"}};
    auto w = word.find(status);
    if (w == word.end()) return t.why = "a line that is not a test status inside the summary block: " + l.substr(0, 120), t;
    ++listed[w->second];
  }
  for (const char* w : {"passed", "failed", "error"})
    if (listed[w] != counted[w])
      return t.why = "the summary lists " + std::to_string(listed[w]) + " " + w + " but its final line counts " + std::to_string(counted[w]), t;
  const bool all_good = counted["failed"] == 0 && counted["error"] == 0;
  if (all_good != (exit_code == 0))
    return t.why = "exit status " + std::to_string(exit_code) + " disagrees with the summary (" + counts + ")", t;
  std::string block;
  for (size_t i = at; i < lines.size(); ++i) block += lines[i] + "\n";
  t.tests = parse_pytest_summary(block);
  t.ok = true;
  return t;
}

}  // namespace mlpt::r2e
