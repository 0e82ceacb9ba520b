#include "pytest_summary.hpp"

#include <cctype>
#include <cstdlib>
#include <string_view>
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

namespace {
// R2E's name of a summary line: the parts after the first "::" joined with '.', cut at " - " unless
// the line is a pass (R2E leaves those whole; the comparison cuts them later).
std::string test_name(const std::string& line, bool cut_reason) {
  std::string name;
  size_t sep = line.find("::");
  if (sep != std::string::npos) {
    name = line.substr(sep + 2);
    for (size_t p = 0; (p = name.find("::", p)) != std::string::npos;) name.replace(p, 2, "."), p += 1;
  }
  if (cut_reason)
    if (size_t cut = name.find(" - "); cut != std::string::npos) name.resize(cut);
  return name;
}
}  // namespace

std::map<std::string, std::string> parse_pytest_summary(const std::string& output) {
  // As R2E-Gym's parse_log_pytest: the text between the first "short test summary info" and the
  // next (or the end), trimmed; a line containing PASSED, else FAILED, else ERROR anywhere is a
  // result of that status.
  std::map<std::string, std::string> result;
  const std::string text = strip_ansi(output);
  const std::string_view header = "short test summary info";
  size_t at = text.find(header);
  if (at == std::string::npos) return result;
  at += header.size();
  const size_t next = text.find(header, at);
  std::string block = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
  const size_t b = block.find_first_not_of(" \t\n\v\f"), e = block.find_last_not_of(" \t\n\v\f");
  block = b == std::string::npos ? "" : block.substr(b, e - b + 1);
  for (size_t start = 0; start <= block.size();) {
    size_t nl = block.find('\n', start);
    if (nl == std::string::npos) nl = block.size();
    const std::string line = block.substr(start, nl - start);
    start = nl + 1;
    if (line.find("PASSED") != std::string::npos)
      result[test_name(line, false)] = "PASSED";
    else if (line.find("FAILED") != std::string::npos)
      result[test_name(line, true)] = "FAILED";
    else if (line.find("ERROR") != std::string::npos)
      result[test_name(line, true)] = "ERROR";
  }
  return result;
}

namespace {

// The output is the code under test's: every check below is a linear scan (no backtracking regex,
// whose recursion a megabyte line overflows).

bool all_of(std::string_view s, int (*pred)(int)) {
  for (char c : s)
    if (!pred(static_cast<unsigned char>(c))) return false;
  return true;
}
int is_number_char(int c) { return std::isdigit(c) || c == '.'; }
int is_time_char(int c) { return std::isdigit(c) || c == ':'; }

// "=+ <inner> =+" (one or more '=' each side, one space each side): the inner text, or false.
bool rule_line(std::string_view line, std::string_view& inner) {
  size_t a = 0, b = line.size();
  while (a < b && line[a] == '=') ++a;
  while (b > a && line[b - 1] == '=') --b;
  if (a == 0 || b == line.size() || b - a < 2 || line[a] != ' ' || line[b - 1] != ' ') return false;
  inner = line.substr(a + 1, b - a - 2);
  return !inner.empty();
}

// "<counts> in <number>s" with an optional " (<h:mm:ss>)": the counts, or false.
bool final_counts(std::string_view inner, std::string_view& counts) {
  auto plain = [&](std::string_view t) {
    if (t.empty() || t.back() != 's') return false;
    t.remove_suffix(1);
    const size_t in = t.rfind(" in ");
    if (in == std::string_view::npos || in == 0) return false;
    const std::string_view number = t.substr(in + 4);
    if (number.empty() || !all_of(number, is_number_char)) return false;
    counts = t.substr(0, in);
    return true;
  };
  if (!inner.empty() && inner.back() == ')') {
    const size_t open = inner.rfind(" (");
    if (open != std::string_view::npos) {
      const std::string_view time = inner.substr(open + 2, inner.size() - open - 3);
      if (!time.empty() && all_of(time, is_time_char) && plain(inner.substr(0, open))) return true;
    }
  }
  return plain(inner);
}

// Every "<digits> <lowercase word>" in `counts`, in order, as a regex search would find them.
std::vector<std::pair<long, std::string>> count_words(std::string_view counts) {
  std::vector<std::pair<long, std::string>> out;
  for (size_t i = 0; i < counts.size();) {
    if (!std::isdigit(static_cast<unsigned char>(counts[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < counts.size() && std::isdigit(static_cast<unsigned char>(counts[j]))) ++j;
    size_t k = j + 1;
    while (k < counts.size() && counts[k] >= 'a' && counts[k] <= 'z') ++k;
    if (j < counts.size() && counts[j] == ' ' && k > j + 1) {
      out.emplace_back(std::atol(std::string(counts.substr(i, j - i)).c_str()), std::string(counts.substr(j + 1, k - j - 1)));
      i = k;
    } else {
      i = j;  // no match can start inside this run of digits: each is followed by the same byte
    }
  }
  return out;
}

// pytest's "!!!!! Interrupted: N error(s) during collection !!!!!", which it prints inside the
// summary block (before the final line) when a test module fails to import.
bool collection_interrupt(std::string_view line) {
  size_t a = 0, b = line.size();
  while (a < b && line[a] == '!') ++a;
  while (b > a && line[b - 1] == '!') --b;
  if (a == 0 || b == line.size()) return false;
  std::string_view inner = line.substr(a, b - a);
  constexpr std::string_view kHead = " Interrupted: ";
  if (inner.substr(0, kHead.size()) != kHead) return false;
  inner.remove_prefix(kHead.size());
  size_t digits = 0;
  while (digits < inner.size() && std::isdigit(static_cast<unsigned char>(inner[digits]))) ++digits;
  const std::string_view rest = inner.substr(digits);
  return digits > 0 && (rest == " error during collection " || rest == " errors during collection ");
}

}  // namespace

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
  size_t at = std::string::npos, headers = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view inner;
    if (rule_line(lines[i], inner) && inner == "short test summary info") ++headers, at = i;
  }
  if (headers != 1) return t.why = std::to_string(headers) + " test summary blocks in the output (expected exactly 1)", t;
  std::string_view inner, counts_view;
  if (lines.empty() || !rule_line(lines.back(), inner) || !final_counts(inner, counts_view))
    return t.why = "the output does not end with pytest's final summary line", t;
  // The counts on the final line, e.g. "5 failed, 3 passed, 1 error".
  std::map<std::string, long> counted;
  const std::string counts(counts_view);
  for (auto [n, word] : count_words(counts)) counted[word == "errors" ? "error" : word] += n;
  std::map<std::string, long> listed;
  for (size_t i = at + 1; i + 1 < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (collection_interrupt(l)) continue;
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
