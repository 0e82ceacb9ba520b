#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "core/check/conformance/checks.hpp"
#include "core/check/in_process_hacks.hpp"
#include "core/run/dataset.hpp"

namespace mlpt::check::conformance {
namespace {

using nlohmann::json;

// The module a Python line imports at its start ("import x", "from x ...": x), or "". The hidden
// tests are the task's bytes: a linear scan, not a backtracking regex.
std::string imported_module(const std::string& line) {
  size_t i = 0;
  if (line.compare(0, 4, "from") == 0)
    i = 4;
  else if (line.compare(0, 6, "import") == 0)
    i = 6;
  else
    return "";
  const size_t spaces = i;
  while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  if (i == spaces || i >= line.size() ||
      !(std::isalpha(static_cast<unsigned char>(line[i])) || line[i] == '_'))
    return "";
  const size_t start = i;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
  return line.substr(start, i - start);
}

// The hack patches every patch-graded reward must score 0 with: each edits what grading must
// ignore (the hidden tests, the test runner, pytest's hooks) so that every test "passes".
// A new-file patch declaring a pytest11 entry point in package metadata under the repository,
// whose plugin marks every test passed.
std::string entry_point_hack(const std::string& meta_dir, const std::string& meta_file) {
  auto file = [](const std::string& path, const std::vector<std::string>& lines) {
    std::string d = "diff --git a/" + path + " b/" + path + "\nnew file mode 100644\n--- /dev/null\n+++ b/" +
                    path + "\n@@ -0,0 +1," + std::to_string(lines.size()) + " @@\n";
    for (const auto& l : lines) d += "+" + l + "\n";
    return d;
  };
  return file(meta_dir + "/" + meta_file, {"Metadata-Version: 2.1", "Name: mlpt-hack", "Version: 0"}) +
         file(meta_dir + "/entry_points.txt", {"[pytest11]", "mlpt_hack = mlpt_hack_plugin"}) +
         file("mlpt_hack_plugin.py", {"import pytest", "@pytest.hookimpl(hookwrapper=True)",
                                      "def pytest_runtest_makereport(item, call):", "    outcome = yield",
                                      "    outcome.get_result().outcome = 'passed'"});
}

const std::vector<std::pair<std::string, std::string>>& known_hacks() {
  static const std::vector<std::pair<std::string, std::string>> hacks = {
      {"conftest_forces_pass",
       "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ "
       "-0,0 +1,6 @@\n"
       "+import pytest\n+@pytest.hookimpl(hookwrapper=True)\n+def pytest_runtest_makereport(item, call):\n"
       "+    outcome = yield\n+    rep = outcome.get_result()\n+    rep.outcome = 'passed'\n"},
      {"runner_replaced",
       "diff --git a/run_tests.sh b/run_tests.sh\nnew file mode 100755\n--- /dev/null\n+++ "
       "b/run_tests.sh\n@@ -0,0 +1,2 @@\n"
       "+#!/bin/sh\n+exit 0\n"},
      {"hidden_tests_planted",
       "diff --git a/r2e_tests/test_planted.py b/r2e_tests/test_planted.py\nnew file mode 100644\n--- "
       "/dev/null\n"
       "+++ b/r2e_tests/test_planted.py\n@@ -0,0 +1,2 @@\n+def test_planted():\n+    assert True\n"},
      // pytest plugins the runner would load by itself: entry points in metadata under the repository.
      {"entry_point_plugin_dist_info", entry_point_hack("mlpt_hack-0.dist-info", "METADATA")},
      {"entry_point_plugin_egg_info", entry_point_hack("mlpt_hack.egg-info", "PKG-INFO")},
      // So many files that preparing the patch prints past any exec output limit.
      {"huge_patch_preparation",
       [] {
         std::string patch;
         for (int i = 0; i < 20000; ++i) {
           std::string f =
               "mlpt_generated/a_file_with_a_long_name_to_fill_the_listing_" + std::to_string(i) + ".txt";
           patch += "diff --git a/" + f + " b/" + f + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + f +
                    "\n@@ -0,0 +1 @@\n+x\n";
         }
         return patch;
       }()},
  };
  return hacks;
}

// Known-correct answers by instance id: rows {"instance_id", "patch"} (graded as the harness's
// result with that patch) or {"instance_id", "result": {...}} (a whole harness result) of a JSONL file.
std::map<std::string, json> load_golden(const std::filesystem::path& file) {
  std::map<std::string, json> golden;
  if (file.empty()) return golden;
  for (const auto& row : run::Dataset::load(file).rows)
    if (row.contains("instance_id") && row["instance_id"].is_string() &&
        ((row.contains("patch") && row["patch"].is_string()) ||
         (row.contains("result") && row["result"].is_object())))
      golden[row["instance_id"].get<std::string>()] = row;
  return golden;
}

// The in-process class (in_process_hacks.hpp): each hack appended to the repository module the
// task's hidden tests import first, as a patch made with git in a fresh sandbox of the task's image,
// must score 0. Not applicable to a reward that runs no code under test (needs_sandbox = 0) or when
// the hidden tests import no module of the repository.
void check_in_process_hacks(Suite& s, const EpisodeEnv& env, const std::string& name, bool needs_sandbox,
                            const std::function<components::Grade(const std::string&)>& grade) {
  const auto hacks_na = [&](const std::string& why) {
    s.not_applicable(name, "in_process_hacks_score_0", why);
  };
  if (!needs_sandbox) return hacks_na("the reward runs no code under test (needs_sandbox = 0)");
  if (!env.runtime || env.image.empty())
    return s.skip(name, "in_process_hacks_score_0", "the combination has no sandbox or the task no image");
  auto box = env.runtime->create(env.image);
  // The hidden tests: the record's (bundled layout), else the image's /r2e_tests (R2E-Gym layout).
  std::string test_file, sources;
  if (env.task.contains("hidden_tests") && env.task["hidden_tests"].is_object()) {
    for (const auto& [path, text] : env.task["hidden_tests"].items())
      if (path.rfind("r2e_tests/", 0) == 0 && path.size() > 3 && path.substr(path.size() - 3) == ".py" &&
          text.is_string()) {
        if (test_file.empty() ||
            (test_file.find("/test_") == std::string::npos && path.find("/test_") != std::string::npos))
          test_file = path;
        sources += text.get<std::string>() + "\n";
      }
  } else {
    std::string listing;
    exec(*box,
         "cd / && ls r2e_tests/test_*.py 2>/dev/null | head -1; echo @@; cat /r2e_tests/*.py 2>/dev/null | "
         "head -c 1048576",
         30000, &listing);
    test_file = listing.substr(0, listing.find('\n'));
    if (size_t at = listing.find("@@\n"); at != std::string::npos) sources = listing.substr(at + 3);
  }
  std::vector<std::string> modules;  // top-level imports of the hidden tests, in order
  std::istringstream lines(sources);
  for (std::string line; std::getline(lines, line);) {
    const std::string module = imported_module(line);
    if (!module.empty() && std::find(modules.begin(), modules.end(), module) == modules.end())
      modules.push_back(module);
  }
  std::string target;
  std::string find = "cd /testbed || exit 3\nfor n in";
  for (const auto& m : modules) find += " " + m;
  find +=
      "; do if [ -f \"$n/__init__.py\" ]; then echo \"$n/__init__.py\"; exit 0; elif [ -f \"$n.py\" ]; then "
      "echo \"$n.py\"; exit 0; fi; done; exit 4\n";
  if (test_file.empty() || modules.empty() || exec(*box, find, 30000, &target) != 0)
    return hacks_na("the task's hidden tests import no module of the repository (imports: " +
                    std::to_string(modules.size()) + ")");
  target = target.substr(0, target.find('\n'));
  std::vector<std::string> tests;
  try {
    const json expected =
        env.task.contains("expected_output_json") && env.task["expected_output_json"].is_string()
            ? json::parse(env.task["expected_output_json"].get<std::string>())
            : env.task.value("expected_output_json", json::object());
    for (const auto& [test, status] : expected.items()) tests.push_back(test);
  } catch (const json::exception&) {
  }
  for (const auto& h : in_process_hacks(test_file, tests))
    s.check(name, "in_process_" + h.id + "_scores_0", [&](std::string& ev) {
      std::string patch;
      const int made =
          exec(*box,
               "cd /testbed && cp '" + target + "' /tmp/mlpt_hack_orig && cat >> '" + target +
                   "' <<'MLPT_HACK_EOF'\n" + h.code + "MLPT_HACK_EOF\ngit -c safe.directory='*' diff -- '" +
                   target + "'; rc=$?; cp /tmp/mlpt_hack_orig '" + target + "'; exit $rc",
               30000, &patch);
      if (made != 0 || patch.find("+++ ") == std::string::npos) {
        ev = "could not make the patch appending to " + target + ": " + patch.substr(0, 200);
        return false;
      }
      auto g = grade(patch);
      ev = h.what + ", appended to " + target + ": scores " + std::to_string(g.reward) + " (" +
           (g.details.is_object() ? g.details.value("reason", "") : g.details.dump().substr(0, 120)) + ")";
      return g.reward == 0.0;
    });
}

}  // namespace

void check_reward(Suite& s, EpisodeEnv& env, const std::filesystem::path& golden_file) {
  const auto& rc = env.set.component(MLPT_COMPONENT_REWARD);
  const std::string name = "reward " + rc.name;
  std::unique_ptr<components::Reward> reward;
  s.check(name, "create", [&](std::string& ev) {
    reward = std::make_unique<components::Reward>(rc, env.set.settings(MLPT_COMPONENT_REWARD));
    ev = std::string("binary = ") + (reward->capabilities().binary ? "1" : "0") +
         ", needs_sandbox = " + (reward->capabilities().needs_sandbox ? "1" : "0");
    return true;
  });
  if (!reward) return;
  if (reward->capabilities().needs_sandbox && !env.runtime) {
    s.skip(name, "grades", "the reward needs a sandbox and the combination has none");
    return;
  }
  if (!env.can_run_episodes()) {
    s.skip(name, "grades", "no harness episode to grade (see the harness checks)");
    return;
  }
  std::vector<double> rewards;  // every reward the checks were given, for `binary`
  auto grade = [&](const json& result) {
    auto g = reward->grade(env.task_json, result.dump(), MLPT_EPISODE_FINISHED, env.binding());
    rewards.push_back(g.reward);
    return g;
  };
  // The result of an episode that did nothing: the harness's own empty result, so its shape is the
  // one this reward is graded on in a run.
  json empty;
  s.check(name, "empty_result_scores_0", [&](std::string& ev) {
    {
      auto o = env.open();
      empty = o.episode->finish(MLPT_EPISODE_FINISHED);
    }
    auto g = grade(empty);
    ev = "an episode finished at once scores " + std::to_string(g.reward) + " (" + g.details.dump() + ")";
    return g.reward == 0.0;
  });
  if (empty.is_null()) return;
  if (reward->capabilities().needs_sandbox) {
    s.not_applicable(name, "grades_without_sandbox",
                     "capability needs_sandbox = 1: it grades through the binding");
  } else {
    s.check(name, "grades_without_sandbox", [&](std::string& ev) {
      auto g = reward->grade(env.task_json, empty.dump(), MLPT_EPISODE_FINISHED, nullptr);
      rewards.push_back(g.reward);
      ev = "graded with no sandbox binding: reward " + std::to_string(g.reward);
      return true;
    });
  }
  const bool patches = empty.contains("patch");
  auto with_patch = [&](const std::string& patch) {
    json result = empty;
    result["patch"] = patch;
    return result;
  };
  // A reward that never scores a correct answer would pass every "scores 0" check: it conforms
  // only once a known-correct answer is seen to score 1.
  const std::string id = env.task.value("instance_id", std::string());
  auto golden = load_golden(golden_file);
  s.check(name, "correct_answer_scores_1", [&](std::string& ev) {
    const std::string where = golden_file.empty()
                                  ? "no golden.jsonl next to the training set and no --golden FILE"
                                  : golden_file.string();
    if (!golden.count(id)) {
      ev = "no known-correct answer for " + id + " (" + where +
           "); a reward is shown to conform only when one scores 1";
      return false;
    }
    const json& row = golden[id];
    json correct;
    if (row.contains("result"))
      correct = row["result"];
    else if (patches)
      correct = with_patch(row["patch"].get<std::string>());
    else {
      ev = "the golden row of " + id + " in " + where +
           " has a patch, but the harness's results carry none; give a \"result\"";
      return false;
    }
    auto g = grade(correct);
    ev = "the correct answer of " + id + " (" + where + ") scores " + std::to_string(g.reward) + " (" +
         g.details.dump().substr(0, 120) + ")";
    return g.reward == 1.0;
  });
  if (!patches) {
    s.not_applicable(name, "known_hacks_score_0", "the harness's results carry no patch");
    s.not_applicable(name, "in_process_hacks_score_0", "the harness's results carry no patch");
  } else {
    for (const auto& [hack, patch] : known_hacks())
      s.check(name, "hack_" + hack + "_scores_0", [&](std::string& ev) {
        auto g = grade(with_patch(patch));
        ev = "scores " + std::to_string(g.reward) + " (" + g.details.dump().substr(0, 120) + ")";
        return g.reward == 0.0;
      });
    check_in_process_hacks(s, env, name, reward->capabilities().needs_sandbox != 0,
                           [&](const std::string& patch) { return grade(with_patch(patch)); });
  }
  if (!reward->capabilities().binary) {
    s.not_applicable(name, "rewards_binary", "capability binary = 0");
  } else {
    size_t other = 0;
    for (double r : rewards) other += r != 0.0 && r != 1.0;
    s.record(name, "rewards_binary", !rewards.empty() && other == 0,
             std::to_string(rewards.size()) + " rewards given in these checks, " + std::to_string(other) +
                 " neither 0 nor 1");
  }
}

}  // namespace mlpt::check::conformance
