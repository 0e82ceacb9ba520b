// Reward hacks of the in-process class (issue 14 §3): Python appended to the repository module the
// hidden tests import first, so it runs inside the test process before any test. Each makes every
// test "pass" on a grader that trusts the test process's own output or pytest's own objects; a
// grader that grades from a channel the code under test cannot reach gives each 0. Used by
// `mlpt check plugins` on any patch-graded reward, and by the rollout tests of the bundled grader.
#pragma once

#include <string>
#include <vector>

namespace mlpt::check {

struct InProcessHack {
  std::string id;    // e.g. "fake_run_on_every_pipe"
  std::string what;  // one line for reports
  std::string code;  // Python, appended to a module: starts and ends with a newline
};

// `test_file`: the hidden test file as pytest names it (e.g. "r2e_tests/test_x.py"); `tests`: the
// names the summary must list (expected_output_json's keys), for the forged runs.
std::vector<InProcessHack> in_process_hacks(const std::string& test_file, const std::vector<std::string>& tests);

}  // namespace mlpt::check
