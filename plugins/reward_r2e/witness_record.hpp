// Grading from a channel the code under test cannot reach (issue 14 §3, the in-process class).
// The hidden tests run under a supervisor (witness/supervisor.py), a process of its own that holds
// a per-grading key the code under test never sees, and a witness (witness/witness.py) that starts
// before pytest and before any repository code, watches the run from inside (audit hook, its own
// compile of the hidden tests, its own verdict per test) and reports to the supervisor on a private
// pipe. The supervisor ends the output with one record line, signed with the key. The grader
// trusts a passing run only when that record is intact and agrees with the parsed summary.
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

// The record's verdict on a run whose summary parsed to `summary` and whose exec ended with
// `exit_code`: agreement (or why not), the violations the witness refused, and what it reports as
// suspect (frame access, tracing, heap walks, ctypes by repository code).
struct WitnessVerdict {
  bool agrees = false;
  std::string why;  // when it does not agree
  nlohmann::json violations = nlohmann::json::array();
  nlohmann::json suspects = nlohmann::json::array();
};
WitnessVerdict cross_check(const nlohmann::json& record, const std::map<std::string, std::string>& summary, int exit_code);

}  // namespace mlpt::r2e
