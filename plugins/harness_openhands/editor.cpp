#include "editor.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "patch.hpp"
#include "text_util.hpp"

namespace mlpt::openhands {

// openhands-aci 0.3.2's notices, appended where its maybe_truncate cut the text.
const char* const kContentTruncatedNotice =
    "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to "
    "you.</NOTE>";
const char* const kFileContentTruncatedNotice =
    "<response clipped><NOTE>Due to the max output limit, only part of this file has been shown to you. You should "
    "retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of "
    "what you are looking for.</NOTE>";
const char* const kDirectoryContentTruncatedNotice =
    "<response clipped><NOTE>Due to the max output limit, only part of this directory has been shown to you. You "
    "should use `ls -la` instead to view large directories incrementally.</NOTE>";

namespace {

// An error the model sees as "ERROR:\n<message>".
struct ToolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string invalid(const std::string& parameter, const std::string& value, const std::string& hint) {
  return "Invalid `" + parameter + "` parameter: " + value + ". " + hint;
}
std::string missing(const std::string& command, const std::string& parameter) {
  return "Parameter `" + parameter + "` is required for command: " + command + ".";
}

// Lines with their terminators, as Python iterates a file.
std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    size_t end = nl == std::string_view::npos ? s.size() : nl + 1;
    lines.push_back(s.substr(start, end - start));
    start = end;
  }
  return lines;
}

// Lines first..last (1-based, inclusive) joined as they are in the file.
std::string line_range(std::string_view s, int64_t first, int64_t last) {
  std::string out;
  auto lines = lines_of(s);
  for (int64_t i = std::max<int64_t>(first, 1); i <= last && i <= static_cast<int64_t>(lines.size()); ++i)
    out.append(lines[i - 1]);
  return out;
}

// The text of a JSON argument as Python's f-string would print the decoded value.
std::string arg_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_number_integer(); })) {
    std::vector<int64_t> ints;
    for (const auto& x : v) ints.push_back(x.get<int64_t>());
    return python_list(ints);
  }
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  return v.dump();
}

bool as_int(const nlohmann::json& v, int64_t& out) {
  if (v.is_number_integer()) return out = v.get<int64_t>(), true;
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
    return out = static_cast<int64_t>(v.get<double>()), true;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t used = 0;
    try {
      out = std::stoll(s, &used);
    } catch (...) {
      return false;
    }
    return used == s.size();
  }
  return false;
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string normalize_path(const std::string& p) {
  if (p.empty()) return ".";
  const bool absolute = p[0] == '/';
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    if (!part.empty() && part != ".") parts.push_back(part);
    i = j + 1;
  }
  std::string out = absolute ? "/" : "";
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "/" : "") + parts[k];
  return out.empty() ? "." : out;
}

std::string maybe_truncate(const std::string& text, size_t limit, const std::string& notice) {
  if (code_points(text) <= limit) return text;
  return text.substr(0, byte_offset(text, limit)) + notice;
}

std::string cat_n(const std::string& content, const std::string& description, int64_t start_line) {
  std::string body = maybe_truncate(content, Editor::kMaxResponseChars, kFileContentTruncatedNotice);
  std::string out = "Here's the result of running `cat -n` on " + description + ":\n";
  size_t start = 0;
  for (int64_t n = start_line;; ++n) {
    size_t nl = body.find('\n', start);
    char number[32];
    std::snprintf(number, sizeof number, "%6lld\t", static_cast<long long>(n));
    if (n != start_line) out += '\n';
    out += number;
    out.append(body, start, nl == std::string::npos ? std::string::npos : nl - start);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out + "\n";
}

Editor::Info Editor::stat(const std::string& path) {
  Info info;
  // One exec: the stat line, then (for a regular file within the size limit) its bytes.
  const std::string q = shell_quote(path);
  ShellResult r = ws_.shell("stat -L -c '%F|%a|%s' -- " + q + " 2>/dev/null || exit 1; if [ -f " + q +
                                " ] && [ \"$(stat -L -c %s -- " + q + ")\" -le " + std::to_string(kMaxFileBytes) +
                                " ]; then printf '@@MLPT_CONTENT@@'; cat -- " + q + "; fi",
                            30000);
  content_loaded_ = false;
  if (r.exit_code != 0) return info;
  size_t nl = r.output.find('\n');
  std::string line = r.output.substr(0, nl);
  if (nl != std::string::npos && r.output.compare(nl + 1, 16, "@@MLPT_CONTENT@@") == 0) {
    content_ = r.output.substr(nl + 17);
    content_loaded_ = true;
  }
  size_t a = line.find('|'), b = line.rfind('|');
  if (a == std::string::npos || a == b) return info;
  info.exists = true;
  info.is_dir = line.substr(0, a) == "directory";
  info.is_regular = line.compare(0, a, "regular file") == 0 || line.compare(0, a, "regular empty file") == 0;
  try {
    info.mode = static_cast<uint32_t>(std::stoul(line.substr(a + 1, b - a - 1), nullptr, 8));
    info.size = std::stoull(line.substr(b + 1));
  } catch (...) {
  }
  // Content cut by the shell's output limit (or a file that changed under us) is not the file.
  if (content_loaded_ && content_.size() != info.size) content_loaded_ = false, content_.clear();
  return info;
}

std::string Editor::read_text(const std::string& path, const Info& info) {
  if (info.size > kMaxFileBytes) {
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.1f", static_cast<double>(info.size) / 1024 / 1024);
    throw ToolError("File validation failed for " + path + ": File is too large (" + mb +
                    "MB). Maximum allowed size is " + std::to_string(kMaxFileBytes / 1024 / 1024) + "MB.");
  }
  // A device, FIFO or socket is never read (a read could block or never end).
  if (!info.is_regular)
    throw ToolError("File validation failed for " + path + ": " + path + " is not a regular file and cannot be viewed or edited by this tool.");
  std::optional<std::string> content;
  if (content_loaded_) {
    content = std::move(content_), content_loaded_ = false;
  } else {
    try {
      content = ws_.read_file(path);
    } catch (const std::exception& e) {  // replaced, grown or unreadable since stat: an observation
      throw ToolError("Ran into an error while trying to read " + path + ": " + e.what());
    }
  }
  if (!content) throw ToolError("Ran into an error while trying to read " + path);
  if (content->find('\0') != std::string::npos)
    throw ToolError("File validation failed for " + path +
                    ": File appears to be binary and this file type cannot be read or edited by this tool.");
  if (valid_utf8(*content) != *content)
    throw ToolError("The editor only supports UTF-8 encoding files, please use bash commands for files with other "
                    "encoding: " + path);
  return *content;
}

void Editor::write_text(const std::string& path, const std::string& text, uint32_t mode) {
  try {
    ws_.write_file(path, text, mode);
  } catch (const std::exception& e) {
    throw ToolError(std::string("Ran into ") + e.what() + " while trying to write to " + path);
  }
}

std::string Editor::run(const nlohmann::json& args) {
  try {
    const std::string command = args.contains("command") ? arg_text(args["command"]) : "";
    const std::string path = normalize_path(args.contains("path") ? arg_text(args["path"]) : "");
    auto has = [&](const char* k) { return args.contains(k) && !args[k].is_null(); };

    if (path.empty() || path[0] != '/') {
      std::string hint = "The path should be an absolute path, starting with `/`.";
      std::string suggested = normalize_path(root_ + "/" + path);
      if (stat(suggested).exists) hint += " Maybe you meant " + suggested + "?";
      throw ToolError(invalid("path", path, hint));
    }
    Info info = stat(path);
    if (command == "create" && info.exists)
      throw ToolError(invalid("path", path, "File already exists at: " + path +
                                                ". Cannot overwrite files using command `create`."));
    if (command != "create" && !info.exists)
      throw ToolError(invalid("path", path, "The path " + path + " does not exist. Please provide a valid path."));
    if (command != "view" && info.is_dir)
      throw ToolError(invalid("path", path, "The path " + path +
                                                " is a directory and only the `view` command can be used on directories."));

    if (command == "view") return view(path, info, has("view_range") ? args["view_range"] : nlohmann::json());
    if (command == "create") {
      if (!has("file_text")) throw ToolError(missing(command, "file_text"));
      std::string text = arg_text(args["file_text"]);
      write_text(path, text, 0644);
      auto& h = history_[path];
      h.push_back(text);
      if (h.size() > kMaxHistory) h.erase(h.begin());
      return "File created successfully at: " + path;
    }
    if (command == "str_replace") {
      if (!has("old_str")) throw ToolError(missing(command, "old_str"));
      std::string old_str = arg_text(args["old_str"]);
      std::string new_str = has("new_str") ? arg_text(args["new_str"]) : "";
      if (has("new_str") && new_str == old_str)
        throw ToolError(invalid("new_str", new_str, "No replacement was performed. `new_str` and `old_str` must be different."));
      return str_replace(path, info, old_str, new_str);
    }
    if (command == "insert") {
      if (!has("insert_line")) throw ToolError(missing(command, "insert_line"));
      if (!has("new_str")) throw ToolError(missing(command, "new_str"));
      int64_t line = 0;
      if (!as_int(args["insert_line"], line))
        throw ToolError(invalid("insert_line", arg_text(args["insert_line"]), "It should be an integer."));
      return insert(path, info, line, arg_text(args["new_str"]));
    }
    if (command == "undo_edit") return undo(path, info);
    throw ToolError("Unrecognized command " + command +
                    ". The allowed commands for the oh_editor tool are: view, create, str_replace, insert, undo_edit");
  } catch (const ToolError& e) {
    return std::string("ERROR:\n") + e.what();
  }
}

std::string Editor::view(const std::string& path, const Info& info, const nlohmann::json& range) {
  const bool has_range = range.is_array() ? !range.empty() : !range.is_null();
  if (info.is_dir) {
    if (has_range)
      throw ToolError(invalid("view_range", arg_text(range),
                              "The `view_range` parameter is not allowed when `path` points to a directory."));
    return view_dir(path);
  }
  std::string content = read_text(path, info);
  if (!has_range) return cat_n(content, path, 1);
  int64_t start = 0, end = 0;
  if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() || !range[1].is_number_integer())
    throw ToolError(invalid("view_range", arg_text(range), "It should be a list of two integers."));
  start = range[0].get<int64_t>();
  end = range[1].get<int64_t>();
  const int64_t num_lines = static_cast<int64_t>(lines_of(content).size());
  if (start < 1 || start > num_lines)
    throw ToolError(invalid("view_range", arg_text(range),
                            "Its first element `" + std::to_string(start) +
                                "` should be within the range of lines of the file: " +
                                python_list({1, num_lines}) + "."));
  std::string warning;
  if (end == -1) {
    end = num_lines;
  } else if (end > num_lines) {
    warning = "We only show up to " + std::to_string(num_lines) + " since there're only " +
              std::to_string(num_lines) + " lines in this file.";
    end = num_lines;
  }
  if (end < start)
    throw ToolError(invalid("view_range", arg_text(range),
                            "Its second element `" + std::to_string(end) +
                                "` should be greater than or equal to the first element `" + std::to_string(start) + "`."));
  // Python: '\n'.join(text.splitlines()) drops the last terminator.
  std::string text = line_range(content, start, end);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  // The note goes before the listing, as openhands-aci 0.3.2 prepends it.
  return (warning.empty() ? "" : "NOTE: " + warning + "\n") + cat_n(text, path, start);
}

std::string Editor::view_dir(const std::string& path) {
  const std::string q = shell_quote(path);
  // Each entry comes as "d PATH" or "f PATH": the listing is clipped as `find | sort` printed it and
  // the folders get their slash after, as openhands-aci 0.3.2 does.
  const std::string cmd =
      "find -L " + q + " -mindepth 1 -maxdepth 1 -name '.*' 2>/dev/null | wc -l; printf '@@MLPT_LIST@@\\n'; "
      "find -L " + q + " -maxdepth 2 -not \\( -path " + shell_quote(path + "/.*") + " -o -path " +
      shell_quote(path + "/*/.*") + " \\) 2>/tmp/.mlpt_find_err | sort | while IFS= read -r p; do "
      "if [ -d \"$p\" ]; then printf 'd %s\\n' \"$p\"; else printf 'f %s\\n' \"$p\"; fi; done; "
      "printf '@@MLPT_ERR@@\\n'; cat /tmp/.mlpt_find_err; rm -f /tmp/.mlpt_find_err";
  ShellResult r = ws_.shell(cmd, 60000);
  const std::string& o = r.output;
  size_t list_at = o.find("@@MLPT_LIST@@\n"), err_at = o.rfind("@@MLPT_ERR@@\n");
  if (list_at == std::string::npos || err_at == std::string::npos || err_at < list_at)
    throw ToolError("Ran into an error while listing " + path + ": " + o);
  long hidden = std::strtol(o.substr(0, list_at).c_str(), nullptr, 10);
  std::string err = o.substr(err_at + 13);
  if (!rstrip(err).empty()) return "ERROR:\n" + err;
  std::string listing;
  std::set<std::string> folders;
  for (const std::string& line : split_lines(o.substr(list_at + 14, err_at - list_at - 14))) {
    if (line.size() < 2) continue;
    if (line[0] == 'd') folders.insert(line.substr(2));
    listing += line.substr(2) + "\n";
  }
  listing = maybe_truncate(listing, kMaxResponseChars, kDirectoryContentTruncatedNotice);
  const size_t first = listing.find_first_not_of(" \t\n\r\f\v");
  std::string out = "Here's the files and directories up to 2 levels deep in " + path + ", excluding hidden items:\n";
  size_t n = 0;
  for (const std::string& p : first == std::string::npos ? std::vector<std::string>{}
                                                          : split_lines(std::string(rstrip(listing.substr(first)))))
    out += (n++ ? "\n" : "") + p + (folders.count(p) ? "/" : "");
  if (hidden > 0)
    out += "\n\n" + std::to_string(hidden) + " hidden files/directories in this directory are excluded. You can use 'ls -la " +
           path + "' to see them.";
  return out;
}

namespace {
// Where `needle` starts in `text`, matches not overlapping (every position for an empty one).
std::vector<size_t> occurrences(const std::string& text, const std::string& needle) {
  std::vector<size_t> starts;
  if (needle.empty()) {
    for (size_t i = 0; i <= text.size(); ++i) starts.push_back(i);
  } else {
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
      starts.push_back(at);
  }
  return starts;
}
// Python's str.strip() for the ASCII whitespace it removes.
std::string python_strip(const std::string& s) {
  const char* space = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}
}  // namespace

std::string Editor::str_replace(const std::string& path, const Info& info, const std::string& old_given,
                                const std::string& new_given) {
  std::string content = read_text(path, info);
  std::string old_str = old_given, new_str = new_given;
  std::vector<size_t> starts = occurrences(content, old_str);
  // As openhands-aci: not found verbatim, both strings lose their outer whitespace and it tries once more.
  if (starts.empty()) {
    old_str = python_strip(old_str);
    new_str = python_strip(new_str);
    starts = occurrences(content, old_str);
  }
  if (starts.empty())
    throw ToolError("No replacement was performed, old_str `" + old_str + "` did not appear verbatim in " + path + ".");
  auto line_of = [&](size_t at) { return static_cast<int64_t>(count(std::string_view(content).substr(0, at), '\n')) + 1; };
  if (starts.size() > 1) {
    std::set<int64_t> lines;
    for (size_t at : starts) lines.insert(line_of(at));
    throw ToolError("No replacement was performed. Multiple occurrences of old_str `" + old_str + "` in lines " +
                    python_list({lines.begin(), lines.end()}) + ". Please ensure it is unique.");
  }
  const int64_t line = line_of(starts[0]);
  std::string updated = content.substr(0, starts[0]) + new_str + content.substr(starts[0] + old_str.size());
  write_text(path, updated, info.mode);
  auto& h = history_[path];
  h.push_back(content);
  if (h.size() > kMaxHistory) h.erase(h.begin());
  const int64_t first = std::max<int64_t>(0, line - kSnippetContext);
  const int64_t last = line + kSnippetContext + static_cast<int64_t>(count(new_str, '\n'));
  return "The file " + path + " has been edited. " +
         cat_n(line_range(updated, first + 1, last), "a snippet of " + path, first + 1) +
         "Review the changes and make sure they are as expected. Edit the file again if necessary.";
}

std::string Editor::insert(const std::string& path, const Info& info, int64_t line, const std::string& new_str) {
  std::string content = read_text(path, info);
  auto lines = lines_of(content);
  const int64_t num_lines = static_cast<int64_t>(lines.size());
  if (line < 0 || line > num_lines)
    throw ToolError(invalid("insert_line", std::to_string(line),
                            "It should be within the range of allowed values: " + python_list({0, num_lines})));
  std::string updated;
  for (int64_t i = 0; i < line; ++i) updated.append(lines[i]);
  int64_t new_lines = 0;
  size_t start = 0;
  for (;;) {  // new_str.split('\n'), each written with a newline
    size_t nl = new_str.find('\n', start);
    updated.append(new_str, start, nl == std::string::npos ? std::string::npos : nl - start);
    updated += '\n';
    ++new_lines;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  for (int64_t i = line; i < num_lines; ++i) updated.append(lines[i]);
  write_text(path, updated, info.mode);
  auto& h = history_[path];
  h.push_back(content);
  if (h.size() > kMaxHistory) h.erase(h.begin());
  const int64_t first = std::max<int64_t>(0, line - kSnippetContext);
  const int64_t last = std::min(num_lines + new_lines, line + kSnippetContext + new_lines);
  return "The file " + path + " has been edited. " +
         cat_n(line_range(updated, first + 1, last), "a snippet of the edited file",
               std::max<int64_t>(1, line - kSnippetContext + 1)) +
         "Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit "
         "the file again if necessary.";
}

std::string Editor::undo(const std::string& path, const Info& info) {
  read_text(path, info);
  auto it = history_.find(path);
  if (it == history_.end() || it->second.empty()) throw ToolError("No edit history found for " + path + ".");
  std::string old_text = std::move(it->second.back());
  it->second.pop_back();
  write_text(path, old_text, info.mode);
  return "Last edit to " + path + " undone successfully. " + cat_n(old_text, path, 1);
}

}  // namespace mlpt::openhands
