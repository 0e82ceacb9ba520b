#include "patch.hpp"

#include "workspace.hpp"

namespace mlpt::openhands {

std::string drop_binary_diffs(const std::string& diff) {
  std::string out, section;
  bool binary = false;
  auto flush = [&] {
    if (!binary) out += section;
    section.clear();
    binary = false;
  };
  size_t start = 0;
  while (start < diff.size()) {
    size_t nl = diff.find('\n', start);
    size_t end = nl == std::string::npos ? diff.size() : nl + 1;
    std::string_view line(diff.data() + start, end - start);
    if (line.substr(0, 11) == "diff --git ") flush();
    if (line.substr(0, 13) == "Binary files " || line.substr(0, 16) == "GIT binary patch") binary = true;
    section.append(line);
    start = end;
  }
  flush();
  return out;
}

std::string patch_command(const std::string& ws, const std::string& base) {
  const std::string git = "git -c safe.directory='*' -c core.quotepath=false ";
  return "cd " + shell_quote(ws) + " && " + git + "add -A >/dev/null 2>&1; " + git + "diff --cached --no-color " +
         shell_quote(base);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl;
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace mlpt::openhands
