// The built `mlpt check log` / `mlpt check summary` commands, run as a user would: exit status
// (0 compliant/scored, 1 violations/no score, 2 usage or I/O error, 3 only the stored MLCommons
// checker fails the log) and what they print.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/mllog/keys.hpp"
#include "simulated_run.hpp"

namespace fs = std::filesystem;
using namespace mlpt;

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

Result mlpt_cli(const std::string& args) {
  std::string cmd = std::string(MLPT_BUILD_DIR) + "/bin/mlpt " + args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const std::string kFixture = std::string(MLPT_SOURCE_DIR) + "/tests/fixtures/mllog/closed_gbs512_converged.txt";

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("mlpt_cli_mllog_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const test::LogLines& log) const {
    std::ofstream(path / name) << log.text();
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("cli: mlpt check log on the fixture, logged before the rule change", "[cli]") {
  // eval_samples 256: the stored MLCommons checker's SUCCESS, the merged rules' failure (251).
  auto merged = mlpt_cli("check log " + kFixture);
  INFO(merged.output);
  CHECK(merged.status == 1);
  CHECK_THAT(merged.output, Catch::Contains("eval_samples_rules"));
  CHECK_THAT(merged.output, Catch::Contains("MLCommons checker 4.1.59 would answer: SUCCESS"));

  auto r = mlpt_cli("check log " + kFixture + " --eval-samples 256");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("COMPLIANT with the merged rules: 50 of 50 rules pass"));
  CHECK_THAT(r.output, Catch::Contains("opt_base_learning_rate"));
  CHECK_THAT(r.output, Catch::Contains("time to train: 117.69"));

  auto j = mlpt_cli("check log " + kFixture + " --eval-samples 256 --json");
  REQUIRE(j.status == 0);
  auto report = nlohmann::json::parse(j.output);
  CHECK(report["compliant"] == true);
  CHECK(report["mlcommons_checker"]["compliant"] == true);
  CHECK(report["run"]["global_batch_size"] == 512);
}

TEST_CASE("cli: a log the rules accept and the stored checker fails exits 3", "[cli]") {
  TempDir dir;
  auto path = dir.write("merged_rules.txt", test::simulate_run({}));  // eval_samples 251
  auto r = mlpt_cli("check log " + path);
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK_THAT(r.output, Catch::Contains("COMPLIANT with the merged rules"));
  CHECK_THAT(r.output, Catch::Contains("would answer: FAIL"));
}

TEST_CASE("cli: mlpt check log reports violations with lines and exit 1", "[cli]") {
  TempDir dir;
  auto log = test::simulate_run({});
  log.set_value(mllog::keys::kOptGradientClipNorm, 0.2);
  const auto line = log.line_of(mllog::keys::kOptGradientClipNorm);
  auto path = dir.write("bad.txt", log);
  auto r = mlpt_cli("check log " + path);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Catch::Contains("NOT COMPLIANT"));
  CHECK_THAT(r.output, Catch::Contains("line " + std::to_string(line)));
  auto j = nlohmann::json::parse(mlpt_cli("check log " + path + " --json").output);
  REQUIRE(j["violations"].size() == 1);
  CHECK(j["violations"][0]["line"] == line);
  CHECK(j["violations"][0]["rule"] == "opt_gradient_clip_norm");
}

TEST_CASE("cli: usage and I/O errors exit 2", "[cli]") {
  CHECK(mlpt_cli("check log /nonexistent/result.txt").status == 2);
  CHECK(mlpt_cli("check log").status == 2);
  CHECK(mlpt_cli("check log " + kFixture + " --division middle").status == 2);
  CHECK(mlpt_cli("check log " + kFixture + " --frobnicate").status == 2);
  CHECK(mlpt_cli("check summary").status == 2);
}

TEST_CASE("cli: mlpt check summary scores three runs and refuses two failures", "[cli]") {
  TempDir dir;
  std::vector<std::string> paths;
  for (int64_t i = 1; i <= 3; ++i)
    paths.push_back(dir.write("run" + std::to_string(i) + ".txt", test::simulate_run({.seed = i, .step_ms = i * 60000})));
  auto r = mlpt_cli("check summary " + paths[0] + " " + paths[1] + " " + paths[2]);
  INFO(r.output);
  CHECK(r.status == 0);
  char score[32];
  std::snprintf(score, sizeof score, "%.4f", test::expected_minutes({.step_ms = 2 * 60000}));
  CHECK_THAT(r.output, Catch::Contains(std::string("olympic average, fastest and slowest dropped): ") + score));

  auto f1 = dir.write("f1.txt", test::simulate_run({.seed = 7, .accuracies = {0.1, 0.2, 0.3}}));
  auto f2 = dir.write("f2.txt", test::simulate_run({.seed = 8, .accuracies = {0.1, 0.2, 0.3}}));
  auto refused = mlpt_cli("check summary " + paths[0] + " " + f1 + " " + f2 + " --json");
  CHECK(refused.status == 1);
  auto j = nlohmann::json::parse(refused.output);
  CHECK(j["scored"] == false);
  CHECK_THAT(j["refusal"].get<std::string>(), Catch::Contains("did not converge"));
}
