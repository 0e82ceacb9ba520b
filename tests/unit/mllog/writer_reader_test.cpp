// The result-log writer and reader: the exact line format of §6, round trips through a file,
// flushing, thread safety, the init block order, and clear errors for malformed lines.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/mllog/init_block.hpp"
#include "core/mllog/keys.hpp"
#include "core/mllog/logger.hpp"
#include "core/mllog/reader.hpp"
#include "simulated_run.hpp"

namespace fs = std::filesystem;
using namespace mlpt;
using nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("mlpt_mllog_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("mllog: a line is formatted exactly as §6", "[mllog]") {
  auto line = mllog::format_line(1700000000123, mllog::EventType::point_in_time, "eval_accuracy", 0.703125,
                                 {{"samples_count", 5120}, {"lineno", 7}, {"file", "loop.cpp"}});
  CHECK(line ==
        ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1700000000123, \"event_type\": \"POINT_IN_TIME\", "
        "\"key\": \"eval_accuracy\", \"value\": 0.703125, \"metadata\": {\"file\": \"loop.cpp\", "
        "\"lineno\": 7, \"samples_count\": 5120}}");
  auto start = mllog::format_line(5, mllog::EventType::interval_start, "run_start", nullptr, json::object());
  CHECK(start == ":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"INTERVAL_START\", "
                 "\"key\": \"run_start\", \"value\": null, \"metadata\": {}}");
}

TEST_CASE("mllog: the committed reference-style fixture re-formats byte for byte", "[mllog]") {
  // The fixture was written with Python's json.dumps, as the reference's mllog does.
  const fs::path fixture = fs::path(MLPT_SOURCE_DIR) / "tests/fixtures/mllog/closed_gbs512_converged.txt";
  std::ifstream in(fixture);
  REQUIRE(in);
  int compared = 0, lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    if (line.rfind(":::MLLOG ", 0) != 0) continue;
    auto r = mllog::parse_line(line, lineno);
    INFO("line " << lineno);
    CHECK(mllog::format_line(r.time_ms, r.event_type, r.key, r.value, r.metadata) == line);
    ++compared;
  }
  CHECK(compared == 68);
}

TEST_CASE("mllog: written records read back identical, with caller file and line", "[mllog]") {
  TempDir dir;
  const auto file = dir.path / "result.txt";
  int64_t now = 1000;
  int callback_lines = 0;
  int64_t point_line = 0;
  {
    mllog::Logger log({.file = file, .sink = [&](const std::string&) { ++callback_lines; }, .clock = [&] { return now; }});
    log.point("seed", 42);
    point_line = __LINE__ - 1;
    now = 2000;
    log.start("block_start", {{"samples_count", 0}});
    now = 3000;
    log.end("block_stop", {{"samples_count", 512}, {"note", "x\"y\\z\n"}});
    log.point("weird", json{{"a", json::array({1, 2.5, "s", nullptr, true})}});
    CHECK(log.lines_written() == 4);
  }
  CHECK(callback_lines == 4);
  auto parsed = mllog::parse_log_file(file);
  REQUIRE(parsed.errors.empty());
  REQUIRE(parsed.records.size() == 4);
  const auto& seed = parsed.records[0];
  CHECK(seed.line == 1);
  CHECK(seed.time_ms == 1000);
  CHECK(seed.event_type == mllog::EventType::point_in_time);
  CHECK(seed.key == "seed");
  CHECK(seed.value == 42);
  CHECK(seed.metadata["file"] == "writer_reader_test.cpp");
  CHECK(seed.metadata["lineno"] == point_line);
  CHECK(parsed.records[1].event_type == mllog::EventType::interval_start);
  CHECK(parsed.records[1].value.is_null());
  CHECK(parsed.records[1].metadata["samples_count"] == 0);
  CHECK(parsed.records[2].event_type == mllog::EventType::interval_end);
  CHECK(parsed.records[2].time_ms == 3000);
  CHECK(parsed.records[2].metadata["note"] == "x\"y\\z\n");
  CHECK(parsed.records[3].value == json{{"a", json::array({1, 2.5, "s", nullptr, true})}});
}

TEST_CASE("mllog: every line is on disk as soon as it is written", "[mllog]") {
  TempDir dir;
  const auto file = dir.path / "result.txt";
  mllog::Logger log({.file = file});
  log.point("a", 1);
  // Read while the logger is still open: an interrupted run leaves complete lines.
  auto first = slurp(file);
  CHECK(first.back() == '\n');
  CHECK(mllog::parse_log_text(first).records.size() == 1);
  log.point("b", 2);
  CHECK(mllog::parse_log_text(slurp(file)).records.size() == 2);
}

TEST_CASE("mllog: lines from many threads never interleave and time never goes back", "[mllog]") {
  TempDir dir;
  const auto file = dir.path / "result.txt";
  {
    mllog::Logger log({.file = file});
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&log, t] {
        for (int i = 0; i < 400; ++i) log.point("tick", json{{"thread", t}, {"i", i}, {"pad", std::string(200, 'p')}});
      });
    for (auto& th : threads) th.join();
  }
  auto parsed = mllog::parse_log_file(file);
  REQUIRE(parsed.errors.empty());
  REQUIRE(parsed.records.size() == 8 * 400);
  std::map<int, int> next;
  int64_t last_ms = 0;
  for (const auto& r : parsed.records) {
    int t = r.value["thread"], i = r.value["i"];
    CHECK(i == next[t]);
    next[t] = i + 1;
    CHECK(r.time_ms >= last_ms);
    last_ms = r.time_ms;
  }
}

TEST_CASE("mllog: the init block is in the reference order with the closed values", "[mllog]") {
  auto log = test::simulate_run({.global_batch_size = 1024});
  auto parsed = log.parse();
  REQUIRE(parsed.errors.empty());
  std::vector<std::string> keys;
  for (const auto& r : parsed.records) {
    if (r.key == mllog::keys::kInitStop) break;
    keys.push_back(r.key);
  }
  std::vector<std::string> expected = {"cache_clear", "init_start", "submission_benchmark", "submission_org",
                                       "submission_division", "submission_status", "submission_platform"};
  for (auto k : mllog::keys::kHyperparameterKeys) expected.emplace_back(k);
  CHECK(keys == expected);
  auto value = [&](std::string_view key) { return parsed.records.at(log.line_of(key) - 1).value; };
  CHECK(value("submission_benchmark") == "qwen35_397b_grpo");
  CHECK(value("global_batch_size") == 1024);
  CHECK(value("num_prompts_per_step") == 64);
  CHECK(value("num_generations_per_prompt") == 16);
  CHECK(value("opt_base_learning_rate").get<double>() == 2.0e-6);
  CHECK(value("opt_gradient_clip_norm").get<double>() == 0.0625);
  CHECK(value("max_sequence_length") == 65536);
  CHECK(value("generation_validation_rollout_top_p").get<double>() == 0.95);
  CHECK(parsed.records[1].event_type == mllog::EventType::interval_start);
}

TEST_CASE("mllog: the reader skips other output and accepts a rank prefix", "[mllog]") {
  auto parsed = mllog::parse_log_text(
      "INFO starting\n"
      "0: :::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 1, \"metadata\": {}}\r\n"
      "some :::MLLOG-looking text without the space\n"
      ":::MLLOG {\"namespace\": \"\", \"time_ms\": 6.4, \"event_type\": \"INTERVAL_END\", \"key\": \"run_stop\", \"value\": null, \"metadata\": {\"status\": \"success\"}}\n");
  REQUIRE(parsed.errors.empty());
  REQUIRE(parsed.records.size() == 2);
  CHECK(parsed.records[0].line == 2);
  CHECK(parsed.records[0].key == "seed");
  CHECK(parsed.records[1].line == 4);
  CHECK(parsed.records[1].time_ms == 6);
  CHECK(parsed.total_lines == 4);
}

TEST_CASE("mllog: malformed lines are errors with their line number and the problem", "[mllog]") {
  const std::string ok = ":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 1, \"metadata\": {}}\n";
  auto parsed = mllog::parse_log_text(
      ok +                                                                                       // 1
      ":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\"\n"  // 2 truncated
      ":::MLLOG [1, 2]\n"                                                                        // 3
      ":::MLLOG {\"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"value\": 1, \"metadata\": {}}\n"  // 4 no key
      ":::MLLOG {\"time_ms\": 5, \"event_type\": \"SOMETIMES\", \"key\": \"k\", \"value\": 1, \"metadata\": {}}\n"  // 5
      ":::MLLOG {\"time_ms\": \"5\", \"event_type\": \"POINT_IN_TIME\", \"key\": \"k\", \"value\": 1, \"metadata\": {}}\n"  // 6
      ":::MLLOG {\"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"k\", \"value\": 1, \"metadata\": 3}\n"  // 7
      + ok);                                                                                     // 8
  CHECK(parsed.records.size() == 2);
  REQUIRE(parsed.errors.size() == 6);
  CHECK(parsed.errors[0].line == 2);
  CHECK_THAT(parsed.errors[0].message, Catch::Contains("invalid JSON"));
  CHECK(parsed.errors[1].line == 3);
  CHECK_THAT(parsed.errors[1].message, Catch::Contains("must be an object"));
  CHECK(parsed.errors[2].line == 4);
  CHECK_THAT(parsed.errors[2].message, Catch::Contains("missing field \"key\""));
  CHECK(parsed.errors[3].line == 5);
  CHECK_THAT(parsed.errors[3].message, Catch::Contains("SOMETIMES"));
  CHECK(parsed.errors[4].line == 6);
  CHECK_THAT(parsed.errors[4].message, Catch::Contains("time_ms"));
  CHECK(parsed.errors[5].line == 7);
  CHECK_THAT(parsed.errors[5].message, Catch::Contains("metadata"));
  CHECK(parsed.records[1].line == 8);
}

TEST_CASE("mllog: unreadable and unwritable files are errors naming the path", "[mllog]") {
  CHECK_THROWS_WITH(mllog::parse_log_file("/nonexistent/dir/result.txt"),
                    Catch::Contains("/nonexistent/dir/result.txt"));
  CHECK_THROWS_AS(mllog::Logger({.file = "/nonexistent/dir/out.txt"}), mlpt::Error);
  mllog::Logger log({.sink = [](const std::string&) {}});
  CHECK_THROWS_WITH(log.point("k", 1, json::array()), Catch::Contains("metadata"));
}
