// pytest's "short test summary info" -> {test name: status} as R2E-Gym's parse_log_pytest reads
// it (docs/benchmark.md §4): ANSI codes and carriage returns removed; a line after the header that
// contains PASSED, else FAILED, else ERROR names a test by the part after the file, `::` parts
// joined with '.', the " - reason" cut from failures and errors (a collection error, without
// "::", is the key ""). tasks/summary.py computes the bundled suite's expected_output_json so.
#pragma once

#include <map>
#include <string>

namespace mlpt::r2e {

std::string strip_ansi(const std::string& text);
std::map<std::string, std::string> parse_pytest_summary(const std::string& output);

// What the grader trusts: the output of exactly one pytest run that ends with its own summary.
// There must be exactly one "short test summary info" header; after it only status lines, then
// pytest's final "N passed, M failed ... in Xs" line as the last line of the output; the counts
// on that line must equal the status lines, and the exit status must agree (0 exactly when
// nothing failed). pytest's own "Interrupted: N error during collection" line may stand among the
// status lines. A fake summary printed in a test's captured output, after the real one or
// ahead of filler that cuts the real one off fails one of these.
struct TrustedSummary {
  bool ok = false;
  std::string why;                          // when not ok
  std::map<std::string, std::string> tests;  // when ok: parse_pytest_summary of the block
};
TrustedSummary trusted_summary(const std::string& output, int exit_code);

}  // namespace mlpt::r2e
