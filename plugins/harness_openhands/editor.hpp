// The `str_replace_editor` tool with the semantics and messages of the OpenHands editor
// (openhands-aci OHEditor): view (cat -n numbering, view_range, directory listing two levels deep
// without hidden entries), create, str_replace (exactly one occurrence), insert, undo_edit.
// Errors are observations starting with "ERROR:\n", never exceptions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workspace.hpp"

namespace mlpt::openhands {

class Editor {
 public:
  // `workspace_root`: where relative paths are suggested from (/testbed).
  Editor(Workspace& workspace, std::string workspace_root) : ws_(workspace), root_(std::move(workspace_root)) {}

  // Runs one call; `args` is the tool call's arguments object. Returns the observation text.
  std::string run(const nlohmann::json& args);

  static constexpr size_t kMaxResponseChars = 16000;  // the editor's own output cap
  static constexpr int kSnippetContext = 4;           // lines shown around an edit
  static constexpr size_t kMaxHistory = 10;           // undo depth per file
  static constexpr uint64_t kMaxFileBytes = 10ull * 1024 * 1024;

 private:
  struct Info {
    bool exists = false, is_dir = false, is_regular = false;
    uint32_t mode = 0644;
    uint64_t size = 0;
  };
  Info stat(const std::string& path);  // also loads the content of a small regular file
  std::string content_;                 // what stat() loaded
  bool content_loaded_ = false;
  std::string read_text(const std::string& path, const Info& info);  // throws ToolError
  void write_text(const std::string& path, const std::string& text, uint32_t mode);
  std::string view(const std::string& path, const Info& info, const nlohmann::json& range);
  std::string view_dir(const std::string& path);
  std::string str_replace(const std::string& path, const Info& info, const std::string& old_str,
                          const std::string& new_str);
  std::string insert(const std::string& path, const Info& info, int64_t line, const std::string& new_str);
  std::string undo(const std::string& path, const Info& info);

  Workspace& ws_;
  std::string root_;
  std::map<std::string, std::vector<std::string>> history_;
};

// "Here's the result of running `cat -n` on {description}:\n" + numbered lines + "\n".
std::string cat_n(const std::string& content, const std::string& description, int64_t start_line);
// Python's maybe_truncate: the first `limit` characters + `notice` when longer.
std::string maybe_truncate(const std::string& text, size_t limit, const std::string& notice);
// pathlib.Path(p) as str: repeated and trailing slashes and "." parts removed.
std::string normalize_path(const std::string& p);

extern const char* const kContentTruncatedNotice;
extern const char* const kFileContentTruncatedNotice;
extern const char* const kDirectoryContentTruncatedNotice;

}  // namespace mlpt::openhands
