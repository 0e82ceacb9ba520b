// pytest's "short test summary info" -> {test name: status} (benchmark.md §4): ANSI codes and
// carriage returns removed; each PASSED/FAILED/ERROR line after the header names a test by the
// part after the file, `::` parts joined with '.', with the " - reason" cut. The same rules as
// tasks/summary.py, which computes the bundled suite's expected_output_json.
#pragma once

#include <map>
#include <string>

namespace mlpt::r2e {

std::string strip_ansi(const std::string& text);
std::map<std::string, std::string> parse_pytest_summary(const std::string& output);

}  // namespace mlpt::r2e
