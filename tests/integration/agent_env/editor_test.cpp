// str_replace_editor: semantics and the exact messages of the OpenHands editor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "editor.hpp"
#include "host_workspace.hpp"

using agent_env_test::HostWorkspace;
using agent_env_test::TempDir;
using nlohmann::json;

namespace {
struct Fixture {
  TempDir dir;
  HostWorkspace ws{dir.path};
  mlpt::openhands::Editor editor{ws, dir.str()};
  std::string file = dir.str() + "/a.py";
  Fixture() { agent_env_test::write(file, "one\ntwo\nthree\n"); }
  std::string run(json args) { return editor.run(args); }
};
}  // namespace

TEST_CASE("view numbers lines like cat -n, the trailing newline giving an empty last line") {
  Fixture f;
  CHECK(f.run({{"command", "view"}, {"path", f.file}}) ==
        "Here's the result of running `cat -n` on " + f.file + ":\n     1\tone\n     2\ttwo\n     3\tthree\n     4\t\n");
}

TEST_CASE("view_range shows the given lines, -1 to the end, and says when the end is past the file") {
  Fixture f;
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {2, 3}}}) ==
        "Here's the result of running `cat -n` on " + f.file + ":\n     2\ttwo\n     3\tthree\n");
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {2, -1}}}) ==
        "Here's the result of running `cat -n` on " + f.file + ":\n     2\ttwo\n     3\tthree\n");
  // openhands-aci 0.3.2 puts its note first, in its own words.
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {3, 9}}}) ==
        "NOTE: We only show up to 3 since there're only 3 lines in this file.\nHere's the result of running `cat -n` "
        "on " + f.file + ":\n     3\tthree\n");
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {0, 2}}}) ==
        "ERROR:\nInvalid `view_range` parameter: [0, 2]. Its first element `0` should be within the range of lines of "
        "the file: [1, 3].");
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {3, 2}}}) ==
        "ERROR:\nInvalid `view_range` parameter: [3, 2]. Its second element `2` should be greater than or equal to the "
        "first element `3`.");
  CHECK(f.run({{"command", "view"}, {"path", f.file}, {"view_range", {1}}}) ==
        "ERROR:\nInvalid `view_range` parameter: [1]. It should be a list of two integers.");
}

TEST_CASE("a directory view lists two levels without hidden entries and counts the hidden ones") {
  Fixture f;
  agent_env_test::write(f.dir.path / "pkg" / "sub" / "deep" / "x.py", "");
  agent_env_test::write(f.dir.path / ".git" / "HEAD", "");
  agent_env_test::write(f.dir.path / "pkg" / ".hidden", "");
  const std::string d = f.dir.str();
  CHECK(f.run({{"command", "view"}, {"path", d + "/"}}) ==
        "Here's the files and directories up to 2 levels deep in " + d + ", excluding hidden items:\n" + d + "/\n" + d +
            "/a.py\n" + d + "/pkg/\n" + d + "/pkg/sub/\n\n1 hidden files/directories in this directory are excluded. "
            "You can use 'ls -la " + d + "' to see them.");
  CHECK(f.run({{"command", "view"}, {"path", d}, {"view_range", {1, 2}}}) ==
        "ERROR:\nInvalid `view_range` parameter: [1, 2]. The `view_range` parameter is not allowed when `path` points to "
        "a directory.");
}

TEST_CASE("create refuses an existing file and makes a new one") {
  Fixture f;
  CHECK(f.run({{"command", "create"}, {"path", f.file}, {"file_text", "x"}}) ==
        "ERROR:\nInvalid `path` parameter: " + f.file + ". File already exists at: " + f.file +
            ". Cannot overwrite files using command `create`.");
  const std::string fresh = f.dir.str() + "/new.py";
  CHECK(f.run({{"command", "create"}, {"path", fresh}}) == "ERROR:\nParameter `file_text` is required for command: create.");
  CHECK(f.run({{"command", "create"}, {"path", fresh}, {"file_text", "print(1)\n"}}) == "File created successfully at: " + fresh);
  CHECK(agent_env_test::read(fresh) == "print(1)\n");
}

TEST_CASE("str_replace needs exactly one verbatim occurrence and shows a snippet of the edit") {
  Fixture f;
  agent_env_test::write(f.file, "a = 1\nb = 2\na = 1\nc = 3\n");
  CHECK(f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "zzz"}, {"new_str", "y"}}) ==
        "ERROR:\nNo replacement was performed, old_str `zzz` did not appear verbatim in " + f.file + ".");
  CHECK(f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "a = 1"}, {"new_str", "y"}}) ==
        "ERROR:\nNo replacement was performed. Multiple occurrences of old_str `a = 1` in lines [1, 3]. Please ensure it "
        "is unique.");
  CHECK(f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "c = 3"}, {"new_str", "c = 3"}}) ==
        "ERROR:\nInvalid `new_str` parameter: c = 3. No replacement was performed. `new_str` and `old_str` must be "
        "different.");
  CHECK(f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "b = 2\n"}, {"new_str", "b = 20\nb2 = 0\n"}}) ==
        "The file " + f.file + " has been edited. Here's the result of running `cat -n` on a snippet of " + f.file +
            ":\n     1\ta = 1\n     2\tb = 20\n     3\tb2 = 0\n     4\ta = 1\n     5\tc = 3\n     6\t\n"
            "Review the changes and make sure they are as expected. Edit the file again if necessary.");
  CHECK(agent_env_test::read(f.file) == "a = 1\nb = 20\nb2 = 0\na = 1\nc = 3\n");
}

TEST_CASE("str_replace retries once with both strings stripped, as openhands-aci does") {
  Fixture f;
  agent_env_test::write(f.file, "a = 1\nb = 2\nc = 3\n");
  // Not verbatim (the outer whitespace is not in the file): stripped, it matches; new_str is
  // stripped as well, so the line keeps its own newline and no more.
  auto out = f.run({{"command", "str_replace"},
                    {"path", f.file},
                    {"old_str", "\n  b = 2 \t\n"},
                    {"new_str", "\n b = 20\n\n"}});
  CHECK(out.rfind("The file " + f.file + " has been edited.", 0) == 0);
  CHECK(agent_env_test::read(f.file) == "a = 1\nb = 20\nc = 3\n");
  // Found neither way: the error names the stripped text, as upstream's message does.
  CHECK(f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "  zzz\n"}, {"new_str", "y"}}) ==
        "ERROR:\nNo replacement was performed, old_str `zzz` did not appear verbatim in " + f.file + ".");
  // Found verbatim: nothing is stripped (new_str keeps its spaces).
  f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "c = 3"}, {"new_str", "  c = 3  "}});
  CHECK(agent_env_test::read(f.file) == "a = 1\nb = 20\n  c = 3  \n");
}

TEST_CASE("insert adds lines after insert_line, undo_edit restores each earlier version") {
  Fixture f;
  CHECK(f.run({{"command", "insert"}, {"path", f.file}, {"insert_line", 9}, {"new_str", "x"}}) ==
        "ERROR:\nInvalid `insert_line` parameter: 9. It should be within the range of allowed values: [0, 3]");
  CHECK(f.run({{"command", "insert"}, {"path", f.file}, {"insert_line", 1}, {"new_str", "one.5"}}) ==
        "The file " + f.file + " has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n"
            "     1\tone\n     2\tone.5\n     3\ttwo\n     4\tthree\n     5\t\nReview the changes and make sure they are "
            "as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.");
  CHECK(agent_env_test::read(f.file) == "one\none.5\ntwo\nthree\n");
  f.run({{"command", "str_replace"}, {"path", f.file}, {"old_str", "two"}, {"new_str", "TWO"}});
  CHECK(f.run({{"command", "undo_edit"}, {"path", f.file}}) ==
        "Last edit to " + f.file + " undone successfully. Here's the result of running `cat -n` on " + f.file +
            ":\n     1\tone\n     2\tone.5\n     3\ttwo\n     4\tthree\n     5\t\n");
  f.run({{"command", "undo_edit"}, {"path", f.file}});
  CHECK(agent_env_test::read(f.file) == "one\ntwo\nthree\n");
  CHECK(f.run({{"command", "undo_edit"}, {"path", f.file}}) == "ERROR:\nNo edit history found for " + f.file + ".");
}

TEST_CASE("paths must be absolute and exist, directories only take view") {
  Fixture f;
  CHECK(f.run({{"command", "view"}, {"path", "a.py"}}) ==
        "ERROR:\nInvalid `path` parameter: a.py. The path should be an absolute path, starting with `/`. Maybe you meant " +
            f.file + "?");
  const std::string missing = f.dir.str() + "/nope.py";
  CHECK(f.run({{"command", "view"}, {"path", missing}}) ==
        "ERROR:\nInvalid `path` parameter: " + missing + ". The path " + missing + " does not exist. Please provide a valid path.");
  CHECK(f.run({{"command", "str_replace"}, {"path", f.dir.str()}, {"old_str", "x"}}) ==
        "ERROR:\nInvalid `path` parameter: " + f.dir.str() + ". The path " + f.dir.str() +
            " is a directory and only the `view` command can be used on directories.");
  agent_env_test::write(f.dir.path / "bin.dat", std::string("ab\0cd", 5));
  CHECK(f.run({{"command", "view"}, {"path", f.dir.str() + "/bin.dat"}}) ==
        "ERROR:\nFile validation failed for " + f.dir.str() +
            "/bin.dat: File appears to be binary and this file type cannot be read or edited by this tool.");
}

TEST_CASE("a long file view is clipped after 16000 characters with the notice") {
  Fixture f;
  agent_env_test::write(f.file, std::string(20000, 'x'));
  std::string out = f.run({{"command", "view"}, {"path", f.file}});
  // openhands-aci 0.3.2: the first 16000 characters, its notice right after them, then numbered.
  CHECK(out == "Here's the result of running `cat -n` on " + f.file + ":\n     1\t" + std::string(16000, 'x') +
                   "<response clipped><NOTE>Due to the max output limit, only part of this file has been shown to "
                   "you. You should retry this tool after you have searched inside the file with `grep -n` in order "
                   "to find the line numbers of what you are looking for.</NOTE>\n");
}

TEST_CASE("a long directory view is clipped as find printed it, folders marked after") {
  Fixture f;
  const std::string d = f.dir.str();
  // Enough folders that `find | sort` prints more than 16000 characters.
  const std::string name(60, 'd');
  std::vector<std::string> lines = {d, d + "/a.py"};
  for (int i = 0; i < 400; ++i) {
    const std::string sub = d + "/" + name + std::to_string(1000 + i);
    std::filesystem::create_directories(sub);
    lines.push_back(sub);
  }
  std::sort(lines.begin(), lines.end());
  std::string raw;
  for (const auto& l : lines) raw += l + "\n";
  REQUIRE(raw.size() > 16000);
  // What openhands-aci does: cut the raw listing at 16000, append the notice, then a slash on each folder.
  const std::string cut = raw.substr(0, 16000) + mlpt::openhands::kDirectoryContentTruncatedNotice;
  std::string expected = "Here's the files and directories up to 2 levels deep in " + d + ", excluding hidden items:\n";
  size_t start = 0;
  bool first = true;
  while (start < cut.size()) {
    size_t nl = cut.find('\n', start);
    const std::string line = cut.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? cut.size() : nl + 1;
    if (line.empty()) continue;
    const bool folder = std::filesystem::is_directory(line);
    expected += (first ? "" : "\n") + line + (folder ? "/" : "");
    first = false;
  }
  CHECK(f.run({{"command", "view"}, {"path", d}}) == expected);
  CHECK(std::string(mlpt::openhands::kDirectoryContentTruncatedNotice) ==
        "<response clipped><NOTE>Due to the max output limit, only part of this directory has been shown to you. You "
        "should use `ls -la` instead to view large directories incrementally.</NOTE>");
}
