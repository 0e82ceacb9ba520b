// The pieces of R2E-Gym grading that need no sandbox: the exclusion list and apply command, the
// comparison with expected_output_json, and the task record fields the grader reads.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::r2e {

// The exclusions of the agent's patch (docs/benchmark.md §4): the files untracked at container start
// (the R2E-Gym image's hidden tests r2e_tests/ and run_tests.sh are among them; the bundled images
// carry them in the record instead, so they are named here). Tracked files, a repository's own
// conftest.py and pytest.ini included, are the agent's to edit. A conftest.py or pytest.ini the
// patch would ADD (not tracked at the base) is left out only when `drop_added_hooks` (the hardened
// grading mode): pytest would load it as a plugin or configuration of the hidden test run. The
// reference applies it, and so does the reference grading mode.
const std::vector<std::string>& hidden_test_patterns();

// Shell lines (run in the repository) that set "$@" to the git apply options of those exclusions,
// `untracked` first.
std::string exclusion_script(const std::vector<std::string>& untracked, bool drop_added_hooks = true);

// `git apply --whitespace=fix <exclusions> PATCH` as one shell command (its output merged);
// `extra` is added to the options (e.g. "--numstat" to list what would be applied).
std::string apply_command(const std::string& workspace, const std::string& patch_file,
                          const std::vector<std::string>& untracked, const std::string& extra = "",
                          bool drop_added_hooks = true);

// One shell script for the grading sandbox: lists the untracked files (adding them to
// `untracked`), prints what the patch would change after every exclusion (--numstat), applies it
// and removes any r2e_tests/ and run_tests.sh, with markers parse_prepare() reads.
std::string prepare_script(const std::string& workspace, const std::string& patch_file,
                           const std::vector<std::string>& untracked, bool drop_added_hooks = true);
struct Prepared {
  std::vector<std::string> untracked;  // the grader's own list
  std::string numstat, apply_output;
  int apply_exit = -1;
  bool complete = false;  // every marker was found
};
Prepared parse_prepare(const std::string& output);

// A record's JSON-or-string field as JSON (R2E-Gym stores some fields as JSON text).
nlohmann::json json_field(const nlohmann::json& record, const std::string& key);

// A test map's names as R2E-Gym's reward cleans both sides before comparing: ANSI colour codes
// (ESC[<digits>m) removed, then cut at the first " - " (so an id `test[a - b]` is `test[a`).
std::map<std::string, std::string> clean_test_names(const std::map<std::string, std::string>& tests);

struct Comparison {
  bool match = false;
  nlohmann::json mismatches = nlohmann::json::array();  // [{"test", "expected", "got"}]
};
Comparison compare(const std::map<std::string, std::string>& expected, const std::map<std::string, std::string>& got);

}  // namespace mlpt::r2e
