// pytest summary parsing (on output captured from a bundled task), patch exclusion with real git,
// binary-diff dropping, the exact comparison, and the task record loader's errors.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <regex>
#include <set>

#include "core/error.hpp"
#include "core/rollout/task_record.hpp"
#include "grading.hpp"
#include "host_workspace.hpp"
#include "patch.hpp"
#include "pytest_summary.hpp"
#include "tamper_scan.hpp"

using agent_env_test::TempDir;

TEST_CASE("the summary of real pytest output (colours on) gives the statuses by name after the file") {
  std::string out = agent_env_test::read(std::string(MLPT_SOURCE_DIR) +
                                         "/tests/integration/agent_env/fixtures/pytest_textkit_truncate_base.txt");
  REQUIRE(out.find("\x1b[") != std::string::npos);
  auto m = mlpt::r2e::parse_pytest_summary(out);
  std::map<std::string, std::string> expected = {
      {"test_cut_text_fits_width", "FAILED"},
      {"test_result_never_longer_than_width[4]", "FAILED"},
      {"test_result_never_longer_than_width[5]", "FAILED"},
      {"test_result_never_longer_than_width[8]", "FAILED"},
      {"test_result_never_longer_than_width[12]", "FAILED"},
      {"test_short_text_unchanged", "PASSED"},
      {"test_tiny_width_gives_part_of_ellipsis", "PASSED"},
      {"test_negative_width_rejected", "PASSED"}};
  CHECK(m == expected);
}

TEST_CASE("summary rules: classes joined with dots, reasons cut, CR removed, lines before the header ignored") {
  std::string out =
      "PASSED r2e_tests/t.py::early\n"
      "=========================== short test summary info ===========================\r\n"
      "PASSED r2e_tests/test_a.py::TestX::test_y\r\n"
      "FAILED r2e_tests/test_a.py::TestX::test_z[a - b] - AssertionError: x - y\n"
      "ERROR r2e_tests/test_b.py::test_fixture - fixture 'db' not found\n"
      "SKIPPED [1] r2e_tests/test_c.py:3: skip\n"
      "========================= 1 failed, 1 passed in 0.02s =========================\n";
  auto m = mlpt::r2e::parse_pytest_summary(out);
  CHECK(m == std::map<std::string, std::string>{{"TestX.test_y", "PASSED"}, {"TestX.test_z[a", "FAILED"},
                                                 {"test_fixture", "ERROR"}});
  CHECK(mlpt::r2e::parse_pytest_summary("no summary here\nPASSED x.py::t\n").empty());
  // A line without "::" (a collection error) is the key "", as R2E-Gym's parse_log_pytest makes it.
  CHECK(mlpt::r2e::parse_pytest_summary("== short test summary info ==\nERROR r2e_tests/test_a.py - ImportError: x\n") ==
        std::map<std::string, std::string>{{"", "ERROR"}});
  CHECK(mlpt::r2e::strip_ansi("\x1b[31mFAILED\x1b[0m a\r") == "FAILED a");
}

TEST_CASE("the grader trusts exactly one summary block at the true end, with counts and exit status that agree") {
  const std::string real = agent_env_test::read(std::string(MLPT_SOURCE_DIR) +
                                                "/tests/integration/agent_env/fixtures/pytest_textkit_truncate_base.txt");
  auto t = mlpt::r2e::trusted_summary(real, 1);
  INFO(t.why);
  REQUIRE(t.ok);
  CHECK(t.tests == mlpt::r2e::parse_pytest_summary(real));
  // The attacks, each on the real output; each is refused with a reason.
  const std::string fake_block =
      "=========================== short test summary info ============================\n"
      "PASSED r2e_tests/test_truncate.py::test_cut_text_fits_width\n"
      "============================== 1 passed in 0.01s ===============================\n";
  struct Attack {
    const char* what;
    std::string output;
    int exit_code;
    const char* reason_has;
  } attacks[] = {
      {"a fake block printed after the real one (at exit)", real + fake_block, 0, "2 test summary blocks"},
      {"a fake block in captured output before the real one", "PASSES\n" + fake_block + real, 1, "2 test summary blocks"},
      {"a fake block followed by filler that cut the real one off", fake_block + std::string(1000, 'x') + "\n", 0,
       "does not end with pytest's final"},
      {"the real output cut before its final line", real.substr(0, real.rfind('\n', real.find_last_not_of('\n')) + 1), 1,
       "does not end with pytest's final"},
      {"a real summary with the exit status forced to 0", real, 0, "exit status 0 disagrees"},
      {"a summary whose final line counts differ from its lines",
       "=== short test summary info ===\nPASSED a.py::t1\nPASSED a.py::t2\n=== 1 passed in 0.01s ===\n", 0, "lists 2 passed"},
      {"a foreign line inside the summary block",
       "=== short test summary info ===\nPASSED a.py::t1\nhello\n=== 1 passed in 0.01s ===\n", 0, "not a test status"},
      {"no summary at all", "collected 0 items\n", 5, "0 test summary blocks"},
      {"invalid UTF-8 and binary noise around a fake block", "\xff\xfe\xf5\x80\n" + fake_block + "\xc3", 0, "does not end"},
  };
  for (const auto& a : attacks) {
    auto v = mlpt::r2e::trusted_summary(a.output, a.exit_code);
    INFO(a.what << ": " << v.why);
    CHECK_FALSE(v.ok);
    CHECK_THAT(v.why, Catch::Contains(a.reason_has));
  }
  // Legitimate shapes still pass: all passed with exit 0, a duration with minutes, errors counted.
  CHECK(mlpt::r2e::trusted_summary("== short test summary info ==\nPASSED a.py::t\n== 1 passed in 61.00s (0:01:01) ==\n", 0).ok);
  CHECK(mlpt::r2e::trusted_summary("== short test summary info ==\nERROR a.py::t - x\nPASSED a.py::u\n== 1 passed, 1 error in 0.1s ==\n\n", 1).ok);
}

// The summary check reads the code under test's output: a linear scan, no backtracking regex (a
// line of a few megabytes overflowed std::regex's recursive matcher and crashed the grader). The
// scan is checked against that regex, the old definition, on short random final lines, and on
// megabyte lines and random bytes.
TEST_CASE("the pytest summary check reads megabyte lines and random bytes without crashing, and agrees with the regex") {
  const std::regex final_line("^=+ (.+) in [0-9.]+s( \\([0-9:]+\\))? =+$");
  const std::regex count("([0-9]+) ([a-z]+)");
  const std::vector<std::string> pieces = {"=", "==", " ", "1", "2", "0", ".", "s", " in ", "in", "(", ")", ":", "passed",
                                           "failed", "error", ",", "x", "errors", "  "};
  std::mt19937_64 rng(11);
  int accepted = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    std::string line;
    const int n = 2 + int(rng() % 14);
    for (int i = 0; i < n; ++i) line += pieces[rng() % pieces.size()];
    if (trial % 2) line = "== " + line + " ==";
    if (trial % 3 == 0) {  // near-valid: each part drawn from a few right and wrong choices
      auto pick = [&](std::initializer_list<const char*> c) { return std::string(c.begin()[rng() % c.size()]); };
      line = pick({"=", "==", "", "= "}) + " " + pick({"1 passed", "1 passed, 2 failed", "3 errors", "", "x"}) +
             pick({" in ", " in", "in "}) + pick({"0.5", "12", ".", "", "1a"}) + pick({"s", "", "ss"}) +
             pick({"", " (0:01:02)", " ()", " (1:x)", "(0:01)"}) + " " + pick({"==", "=", ""});
    }
    std::smatch m;
    const bool regex_accepts = std::regex_match(line, m, final_line);
    // A block with one passed test: the final line is accepted iff the reason is not "does not end".
    const auto t = mlpt::r2e::trusted_summary("== short test summary info ==\nPASSED a.py::t\n" + line + "\n", 0);
    INFO("final line [" << line << "]: " << t.why);
    CHECK(regex_accepts == (t.why.find("does not end with pytest's final summary line") == std::string::npos));
    if (regex_accepts) {
      ++accepted;
      long passed = 0;  // what the regex counts; the scan's count decides ok with one listed PASSED
      const std::string counts = m[1].str();
      for (auto it = std::sregex_iterator(counts.begin(), counts.end(), count); it != std::sregex_iterator(); ++it)
        if ((*it)[2] == "passed") passed += std::atol((*it)[1].str().c_str());
      if (passed != 1) CHECK_FALSE(t.ok);
    }
  }
  CHECK(accepted > 10);  // the generator reaches accepted lines (27 of 6000 with this seed)
  // A megabyte line anywhere, a megabyte final line, and random bytes: a reason, never a crash.
  const std::string mega(4 << 20, '=');
  for (const std::string& out : {mega + "\n", "== short test summary info ==\nPASSED a\n== " + std::string(1 << 20, '1') + " passed in 1s ==\n",
                                 "== short test summary info ==\nPASSED a\n" + std::string(3 << 20, 'x') + "\n== 1 passed in 1s ==\n"}) {
    const auto t = mlpt::r2e::trusted_summary(out, 0);
    CHECK_FALSE(t.ok);
    CHECK_FALSE(t.why.empty());
  }
  // Megabyte rules around a true final line are pytest's own shape: read, and right.
  CHECK(mlpt::r2e::trusted_summary("== short test summary info ==\nPASSED a\n" + mega + " 1 passed in 1s " + mega + "\n", 0).ok);
  for (int trial = 0; trial < 200; ++trial) {
    std::string junk(size_t(rng() % 8192), '\0');
    for (char& c : junk) c = char(rng());
    CHECK_FALSE(mlpt::r2e::trusted_summary(junk, 0).ok);
  }
}

TEST_CASE("patches that reach into the runner, the import machinery or the call stack are found") {
  auto scan = [](const std::string& added, const std::string& file = "pkg/mod.py") {
    return mlpt::r2e::scan_patch_for_tampering("diff --git a/" + file + " b/" + file + "\n--- a/" + file + "\n+++ b/" + file +
                                               "\n@@ -1 +1,2 @@\n x = 1\n+" + added + "\n");
  };
  for (const char* attack : {"import sys; sys.modules['r2e_tests'] = None", "frame = sys._getframe(2)",
                             "caller = inspect.stack()[1].frame.f_locals", "import _pytest.reports",
                             "atexit.register(lambda: os._exit(0))", "sys.meta_path.insert(0, Finder())",
                             "for o in gc.get_objects(): pass", "builtins.open = fake_open", "sys.settrace(tracer)"}) {
    INFO(attack);
    auto f = scan(attack);
    REQUIRE(f.size() == 1);
    CHECK(f[0].file == "pkg/mod.py");
  }
  CHECK(scan("", "evil.pth").size() == 1);
  CHECK(scan("", "sitecustomize.py").size() == 1);
  CHECK(scan("", "x-0.dist-info/entry_points.txt").size() == 1);
  // Ordinary fixes are not flagged, nor removed lines.
  CHECK(scan("return value.strip().lower() in TRUE_WORDS").empty());
  CHECK(mlpt::r2e::scan_patch_for_tampering("--- a/m.py\n+++ b/m.py\n-import sys; sys.modules.clear()\n").empty());
}

TEST_CASE("the key \"\" counts in the length comparison and is skipped in the value comparison, as in R2E-Gym") {
  std::map<std::string, std::string> exp = {{"a", "PASSED"}, {"b", "PASSED"}};
  // A collection error beside one expected test: as many entries as expected, "" not compared.
  CHECK(mlpt::r2e::compare(exp, {{"", "ERROR"}, {"a", "PASSED"}}).match);
  // The same error beside both tests is one entry too many.
  CHECK_FALSE(mlpt::r2e::compare(exp, {{"", "ERROR"}, {"a", "PASSED"}, {"b", "PASSED"}}).match);
  CHECK_FALSE(mlpt::r2e::compare(exp, {{"", "ERROR"}, {"a", "FAILED"}}).match);
}

namespace {
std::string fixture(const std::string& name) {
  return agent_env_test::read(std::string(MLPT_SOURCE_DIR) + "/tests/integration/agent_env/fixtures/" + name);
}
}  // namespace

TEST_CASE("a real collection error is pytest's own output: trusted, parsed as R2E-Gym parses it") {
  // pytest 7.2.1 -rA --color=yes on r2e_tests/ whose test_broken.py imports a missing module (exit
  // status 2): "ERROR r2e_tests/test_broken.py" and "!!! Interrupted: 1 error during collection !!!"
  // inside the summary block.
  const std::string out = fixture("pytest_collection_error.txt");
  REQUIRE(out.find("Interrupted: 1 error during collection") != std::string::npos);
  auto t = mlpt::r2e::trusted_summary(out, 2);
  INFO(t.why);
  REQUIRE(t.ok);
  CHECK(t.tests == std::map<std::string, std::string>{{"", "ERROR"}});
  // R2E-Gym's reward: 1.0 exactly when that is the expected map (length 1, "" not compared).
  CHECK(mlpt::r2e::compare({{"", "ERROR"}}, t.tests).match);
  // R2E's own quirk, kept: one expected test against the one collection error is as many entries,
  // and "" is not compared, so that scores 1.0 there too.
  CHECK(mlpt::r2e::compare({{"test_one", "PASSED"}}, t.tests).match);
  CHECK_FALSE(mlpt::r2e::compare({{"test_one", "PASSED"}, {"test_param[c]", "PASSED"}}, t.tests).match);
  // The interrupt line stands only as pytest writes it.
  for (const char* odd :
       {"!!! Interrupted: many errors during collection !!!", "!!! Interrupted: 1 error during collection",
        "Interrupted: 1 error during collection !!!", "!!! Interrupted: 1 error during collection !!! ok"}) {
    std::string edited = out;
    const size_t at = edited.find("!!!!");
    const size_t end = edited.find('\n', at);
    edited.replace(at, end - at, odd);
    INFO(odd);
    CHECK_FALSE(mlpt::r2e::trusted_summary(edited, 2).ok);
  }
}

TEST_CASE("names are cleaned on both sides as R2E-Gym's reward cleans them") {
  // pytest 7.2.1 -rA --color=yes on a parametrized test whose id holds " - ": the name is kept
  // whole by the parser (a pass has no reason to cut) and cut at " - " on both sides by the reward.
  const std::string out = fixture("pytest_param_dash_id.txt");
  auto t = mlpt::r2e::trusted_summary(out, 0);
  INFO(t.why);
  REQUIRE(t.ok);
  CHECK(t.tests ==
        std::map<std::string, std::string>{{"test_param[a - b]", "PASSED"}, {"test_param[c]", "PASSED"}});
  const std::map<std::string, std::string> expected = {{"test_param[a - b]", "PASSED"},
                                                       {"test_param[c]", "PASSED"}};
  CHECK(mlpt::r2e::compare(expected, t.tests).match);
  // Expected names coloured, as some R2E-Gym rows store them: the colour goes, the name matches.
  CHECK(mlpt::r2e::compare({{"\x1b[1mtest_param[a - b]\x1b[0m", "PASSED"}, {"test_param[c]", "PASSED"}},
                           t.tests)
            .match);
  CHECK(mlpt::r2e::clean_test_names({{"\x1b[1mt[a - b]\x1b[0m", "PASSED"}}) ==
        std::map<std::string, std::string>{{"t[a", "PASSED"}});
  // Two names that cut to one: the later in name order wins, as in R2E's dict comprehension.
  CHECK(mlpt::r2e::clean_test_names({{"t[a - b]", "PASSED"}, {"t[a - c]", "FAILED"}}) ==
        std::map<std::string, std::string>{{"t[a", "FAILED"}});
}

TEST_CASE("a status is found anywhere in a summary line, as R2E-Gym's substring test finds it") {
  const std::string out =
      "=========================== short test summary info ===========================\n"
      "[gw0] PASSED r2e_tests/test_a.py::test_x\n"
      "FAILED r2e_tests/test_a.py::test_y - AssertionError: PASSED is not FAILED\n"
      "ERROR r2e_tests/test_b.py::test_z - fixture 'db' not found\n"
      "========================= 1 failed, 1 passed, 1 error in 0.02s =========================\n";
  // "PASSED" is looked for first: the failure whose message says PASSED counts as passed, as in R2E.
  CHECK(mlpt::r2e::parse_pytest_summary(out) ==
        std::map<std::string, std::string>{{"test_x", "PASSED"},
                                           {"test_y - AssertionError: PASSED is not FAILED", "PASSED"},
                                           {"test_z", "ERROR"}});
}

TEST_CASE("comparison is exact: a missing, extra or different test is a mismatch") {
  std::map<std::string, std::string> exp = {{"a", "PASSED"}, {"b", "PASSED"}};
  CHECK(mlpt::r2e::compare(exp, exp).match);
  CHECK_FALSE(mlpt::r2e::compare(exp, {{"a", "PASSED"}}).match);
  CHECK_FALSE(mlpt::r2e::compare(exp, {{"a", "PASSED"}, {"b", "PASSED"}, {"c", "PASSED"}}).match);
  auto c = mlpt::r2e::compare(exp, {{"a", "PASSED"}, {"b", "FAILED"}});
  REQUIRE(c.mismatches.size() == 1);
  CHECK(c.mismatches[0]["test"] == "b");
  CHECK(c.mismatches[0]["got"] == "FAILED");
}

TEST_CASE(
    "git apply skips untracked-at-start files, hidden tests, run_tests.sh, and (hardened) conftest.py files "
    "the patch adds") {
  TempDir d;
  auto sh = [&](const std::string& cmd) {
    agent_env_test::HostWorkspace ws(d.path);
    return ws.shell(cmd, 60000);
  };
  agent_env_test::write(d.path / "pkg" / "mod.py", "x = 1\n");
  agent_env_test::write(d.path / "tests" / "conftest.py", "limit = 1\n");  // the repository's own, tracked
  agent_env_test::write(d.path / "pytest.ini", "[pytest]\n");
  REQUIRE(sh("git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init").exit_code == 0);
  agent_env_test::write(d.path / "setup_env.sh", "# untracked at start\n");
  // The agent's changes: a real fix, and edits that must not reach grading.
  agent_env_test::write(d.path / "pkg" / "mod.py", "x = 2\n");
  agent_env_test::write(d.path / "setup_env.sh", "# edited\n");
  agent_env_test::write(d.path / "conftest.py", "forced = True\n");
  agent_env_test::write(d.path / "pkg" / "conftest.py", "forced = True\n");
  agent_env_test::write(d.path / "r2e_tests" / "test_fake.py", "def test_x(): pass\n");
  agent_env_test::write(d.path / "run_tests.sh", "echo PASSED\n");
  // Legitimate fixes in tracked configuration files.
  agent_env_test::write(d.path / "tests" / "conftest.py", "limit = 2\n");
  agent_env_test::write(d.path / "pytest.ini", "[pytest]\nxfail_strict = true\n");
  auto diff = sh(mlpt::openhands::patch_command(d.str(), "HEAD"));
  REQUIRE(diff.exit_code == 0);
  agent_env_test::write(d.path / "agent.patch", diff.output);
  REQUIRE(sh("git reset -q --hard && git clean -fdq -e agent.patch && printf '# untracked at start\\n' > setup_env.sh").exit_code == 0);
  auto applied = sh(mlpt::r2e::apply_command(d.str(), d.str() + "/agent.patch", {"setup_env.sh"}));
  INFO(applied.output);
  REQUIRE(applied.exit_code == 0);
  CHECK(agent_env_test::read(d.path / "pkg" / "mod.py") == "x = 2\n");
  CHECK(agent_env_test::read(d.path / "setup_env.sh") == "# untracked at start\n");
  CHECK(agent_env_test::read(d.path / "tests" / "conftest.py") == "limit = 2\n");  // tracked: the fix applies
  CHECK(agent_env_test::read(d.path / "pytest.ini") == "[pytest]\nxfail_strict = true\n");
  CHECK_FALSE(std::filesystem::exists(d.path / "conftest.py"));
  CHECK_FALSE(std::filesystem::exists(d.path / "pkg" / "conftest.py"));
  CHECK_FALSE(std::filesystem::exists(d.path / "r2e_tests"));
  CHECK_FALSE(std::filesystem::exists(d.path / "run_tests.sh"));
  // The grader's one-exec form gives the same tree and reports its own untracked list.
  REQUIRE(sh("git reset -q --hard && git clean -fdq -e agent.patch && printf '# untracked at start\\n' > setup_env.sh").exit_code == 0);
  auto prep = mlpt::r2e::parse_prepare(sh(mlpt::r2e::prepare_script(d.str(), d.str() + "/agent.patch", {})).output);
  REQUIRE(prep.complete);
  CHECK(prep.apply_exit == 0);
  CHECK(prep.untracked == std::vector<std::string>{"agent.patch", "setup_env.sh"});
  CHECK(prep.numstat.find("pkg/mod.py") != std::string::npos);
  CHECK(prep.numstat.find("tests/conftest.py") != std::string::npos);
  CHECK(prep.numstat.find("pkg/conftest.py") == std::string::npos);
  CHECK(agent_env_test::read(d.path / "tests" / "conftest.py") == "limit = 2\n");
  CHECK(agent_env_test::read(d.path / "pkg" / "mod.py") == "x = 2\n");
  CHECK(agent_env_test::read(d.path / "setup_env.sh") == "# untracked at start\n");
  CHECK_FALSE(std::filesystem::exists(d.path / "conftest.py"));
  // The reference grading mode applies the added conftest.py files, as R2E-Gym does; the untracked
  // file and the hidden tests stay excluded.
  REQUIRE(sh("git reset -q --hard && git clean -fdq -e agent.patch && printf '# untracked at start\\n' > "
             "setup_env.sh")
              .exit_code == 0);
  prep = mlpt::r2e::parse_prepare(
      sh(mlpt::r2e::prepare_script(d.str(), d.str() + "/agent.patch", {}, /*drop_added_hooks=*/false))
          .output);
  REQUIRE(prep.complete);
  CHECK(prep.apply_exit == 0);
  CHECK(agent_env_test::read(d.path / "conftest.py") == "forced = True\n");
  CHECK(agent_env_test::read(d.path / "pkg" / "conftest.py") == "forced = True\n");
  CHECK(agent_env_test::read(d.path / "setup_env.sh") == "# untracked at start\n");
  CHECK_FALSE(std::filesystem::exists(d.path / "r2e_tests"));
  CHECK_FALSE(std::filesystem::exists(d.path / "run_tests.sh"));
}

TEST_CASE("binary diffs are dropped from the patch, text sections kept byte for byte") {
  const std::string text = "diff --git a/a.py b/a.py\nindex 1..2 100644\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n";
  const std::string binary = "diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0..3\nBinary files /dev/null and b/img.png differ\n";
  CHECK(mlpt::openhands::drop_binary_diffs(binary + text + binary) == text);
  CHECK(mlpt::openhands::drop_binary_diffs(text) == text);
  CHECK(mlpt::openhands::drop_binary_diffs("") == "");
}

TEST_CASE("the bundled suite loads: at least 12 tasks from 3 projects, images named <repo>_final_<commit>.sif") {
  auto tasks = mlpt::rollout::load_task_records(std::string(MLPT_SOURCE_DIR) + "/tasks/suite.jsonl");
  CHECK(tasks.size() >= 12);
  std::set<std::string> repos;
  for (const auto& t : tasks) {
    repos.insert(t.repo_name);
    CHECK(t.instance_id == "mlpt__" + t.repo_name + "-" + t.commit_hash);
    CHECK(t.image("/img") == "/img/" + t.repo_name + "_final_" + t.commit_hash + ".sif");
    CHECK_FALSE(t.base_commit.empty());
  }
  CHECK(repos.size() >= 3);
  auto validation = mlpt::rollout::load_task_records(std::string(MLPT_SOURCE_DIR) + "/tasks/validation.jsonl");
  CHECK(validation.size() >= 3);
  CHECK(&mlpt::rollout::find_task(tasks, tasks[3].commit_hash.substr(0, 12)) == &tasks[3]);
}

TEST_CASE("malformed task rows are errors naming file, line and field") {
  TempDir d;
  std::string good;
  {
    std::ifstream in(std::string(MLPT_SOURCE_DIR) + "/tasks/suite.jsonl");
    std::getline(in, good);
  }
  auto error_of = [&](const std::string& second_line) {
    agent_env_test::write(d.path / "t.jsonl", good + "\n" + second_line + "\n");
    try {
      mlpt::rollout::load_task_records(d.path / "t.jsonl");
    } catch (const mlpt::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto row = nlohmann::json::parse(good);
  CHECK_THAT(error_of("{not json"), Catch::Contains("t.jsonl:2: not valid JSON"));
  auto r1 = row;
  r1.erase("commit_hash");
  CHECK_THAT(error_of(r1.dump()), Catch::Contains("t.jsonl:2: missing field \"commit_hash\""));
  auto r2 = row;
  r2["num_non_test_lines"] = "three";
  CHECK_THAT(error_of(r2.dump()), Catch::Contains("t.jsonl:2: field \"num_non_test_lines\" has type string"));
  auto r3 = row;
  r3["expected_output_json"] = R"({"test_a": "WEIRD"})";
  CHECK_THAT(error_of(r3.dump()), Catch::Contains("test \"test_a\" has status \"WEIRD\""));
  auto r4 = row;
  r4["expected_output_json"] = "{broken";
  CHECK_THAT(error_of(r4.dump()), Catch::Contains("field \"expected_output_json\" is not valid JSON text"));
}
