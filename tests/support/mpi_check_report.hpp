// What a test does with an MPI check program (mpi_check_main.hpp): runs it under mpirun with a
// time limit, fails the test when the program fails, and reads the JSON line world rank 0 printed.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "mpirun_command.hpp"
#include "tests/support/test_util.hpp"

namespace mlpt_test {

// `program_and_args` on `ranks` ranks; its report is the first output line that starts with {".
inline nlohmann::json mpi_check_report(int ranks, const std::string& program_and_args) {
  int status = 0;
  const std::string cmd = "timeout -k 5 300 " + mpirun_command(ranks) + program_and_args + " 2>&1";
  const std::string out = run_command(cmd, &status);
  INFO(cmd << "\n" << out);
  CHECK(status == 0);
  const size_t line = out.find("{\"");
  REQUIRE(line != std::string::npos);
  return nlohmann::json::parse(out.substr(line, out.find('\n', line) - line));
}

}  // namespace mlpt_test
