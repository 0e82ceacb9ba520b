// The grading witness itself (plugins/reward_r2e/witness/witness.py) run by the host's Python on a
// small repository in a folder: a hook of the repository that takes part in pytest's call protocol
// (here a conftest.py whose pytest_pyfunc_call never calls the test) passes a failing test without
// its code running, which the phases the witness sees cannot show; the witness reports it as suspect,
// so the hardened grading mode scores the run 0.
#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host_workspace.hpp"
#include "witness_record.hpp"
#include "workspace.hpp"

using agent_env_test::TempDir;
using nlohmann::json;

namespace {

struct WitnessRun {
  std::string output;
  std::vector<json> events;  // the witness's channel, each line "<hmac> <json>" after its key line
};

// Runs the hidden tests of `repo` as the bundled run_tests.sh does, under the witness.
WitnessRun run_witness(const TempDir& repo) {
  agent_env_test::write(repo.path / ".witness" / "witness.py", mlpt::r2e::kWitnessPy);
  const std::string q = mlpt::openhands::shell_quote(repo.str());
  const std::string command =
      "cd " + q + " && MLPT_WITNESS_FD=9 MLPT_WITNESS_WORKSPACE=" + q +
      " /usr/bin/python3 -I -B .witness/witness.py -c 'import pytest; raise SystemExit(pytest.main())' "
      "-rA -p no:cacheprovider -c /dev/null --rootdir=" +
      q + " r2e_tests 9>.witness/events 2>&1";
  WitnessRun r;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  pclose(p);
  std::string events = agent_env_test::read(repo.path / ".witness" / "events");
  size_t at = events.find('\n');  // the key line
  while (at != std::string::npos && at + 1 < events.size()) {
    size_t end = events.find('\n', at + 1);
    std::string line = events.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    size_t space = line.find(' ');
    if (space != std::string::npos) r.events.push_back(json::parse(line.substr(space + 1), nullptr, false));
    at = end;
  }
  return r;
}

std::vector<json> of_kind(const WitnessRun& r, const std::string& kind) {
  std::vector<json> out;
  for (const auto& e : r.events)
    if (e.is_object() && e.value("t", "") == kind) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("a repository hook that replaces pytest's call of a test is reported by the witness") {
  for (bool forcing : {false, true}) {
    INFO((forcing ? "with" : "without") << " the repository's forcing conftest.py");
    TempDir repo;
    agent_env_test::write(repo.path / "r2e_tests" / "test_x.py", "def test_fails():\n    assert 1 == 2\n");
    if (forcing)
      agent_env_test::write(repo.path / "conftest.py",
                            "import pytest\n@pytest.hookimpl(tryfirst=True)\ndef "
                            "pytest_pyfunc_call(pyfuncitem):\n    return True\n");
    WitnessRun r = run_witness(repo);
    INFO(r.output);
    auto tests = of_kind(r, "test");
    REQUIRE(tests.size() == 1);
    // The hook is real: pytest reports the failing test passed and the witness saw no exception ...
    CHECK((r.output.find("PASSED r2e_tests/test_x.py::test_fails") != std::string::npos) == forcing);
    CHECK((tests[0]["call"] == "ok") == forcing);
    // ... so only the report of the hook itself keeps the run from being paid.
    bool reported = false;
    for (const auto& s : of_kind(r, "suspect"))
      reported |= s.value("what", "").rfind("pytest_pyfunc_call implemented by the repository", 0) == 0 &&
                  s.value("at", "") == repo.str() + "/conftest.py:2";
    CHECK(reported == forcing);
    CHECK(of_kind(r, "violation").empty());
  }
}
