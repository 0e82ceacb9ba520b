// Grading from a channel the code under test cannot reach (issue 14 §3, issue 30 class 2).
// The hidden tests run under a supervisor (witness/supervisor.py), a process of its own that holds
// a per-grading key the code under test never sees. The run's interpreter starts the witness's
// judge (witness/witness.py), which never runs repository code: it forks one child to collect the
// tests and one child per test, and decides each test's status from what it observes across the
// process boundary (the child's exit status, its summary line and its witness's signed events).
// Its verdicts reach the supervisor on a socket only the judge holds; the supervisor ends the
// output with one record line, signed with the key. The grader takes the statuses from that record
// alone: nothing that decides them lives in an object the code under test can reach.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace mlpt::r2e {

// The Python files the grader writes into the grading sandbox (embedded at build time).
extern const char* const kWitnessSupervisorPy;
extern const char* const kWitnessPy;

// The shell command that runs `command` (the hidden-test run) in `workspace` under the supervisor
// installed in `dir`, with the key in `key_file` (which the supervisor deletes before the run).
std::string supervised_command(const std::string& dir, const std::string& key_file, const std::string& nonce,
                               const std::string& workspace, const std::string& command);

// The output of a supervised run, split: the run's own output and the supervisor's record.
struct WitnessRecord {
  bool ok = false;
  std::string why;             // when not ok: what is wrong with the record
  std::string run_output;      // the run's output, as the supervisor forwarded it
  nlohmann::json record;       // the signed record (exit, out_bytes, out_sha256, events, ...)
};
WitnessRecord split_witness_record(const std::string& output, const std::string& key, const std::string& nonce);

// The judge's verdicts in a record, for a run whose exec ended with `exit_code`: each test's status
// by its summary name (pytest's node id after the file, "::" as "."; "" for a file that did not
// collect), or why the record cannot be trusted (no judge, an incomplete run, a test the judge
// could not trust, a refused tampering); what the children's witnesses reported as suspect (frame
// access, tracing, ctypes, a repository hook in pytest's call protocol) is passed on.
struct WitnessVerdict {
  bool agrees = false;
  std::string why;  // when it does not agree
  std::map<std::string, std::string> statuses;
  nlohmann::json violations = nlohmann::json::array();
  nlohmann::json suspects = nlohmann::json::array();
};
WitnessVerdict judged_statuses(const nlohmann::json& record, int exit_code);

}  // namespace mlpt::r2e
