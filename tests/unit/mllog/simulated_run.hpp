// A whole result log for one simulated run, written by the real mllog::Logger with a simulated
// clock, and small edits of it by key so each test breaks exactly one rule. Lines are the log's
// lines, so line numbers in violations are index + 1.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mllog/init_block.hpp"
#include "core/mllog/keys.hpp"
#include "core/mllog/reader.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::test {

struct SimulatedRun {
  int64_t global_batch_size = 512;
  int64_t seed = 1234;
  int64_t start_ms = 1'700'000'000'000;
  int64_t init_minutes = 20;                        // init_start → init_stop
  int64_t step_ms = 9 * 60 * 1000;                  // one training step
  int64_t eval_ms = 3 * 60 * 1000;                  // one validation
  std::vector<double> accuracies = {0.60, 0.65, 0.70};  // one per eval point; the last converges
  std::string status = "success";
};

struct LogLines {
  std::vector<std::string> lines;

  std::string text() const {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
  mllog::ParsedLog parse() const { return mllog::parse_log_text(text()); }

  // 1-based line of the nth (0-based) record with `key`.
  int64_t line_of(std::string_view key, int nth = 0) const {
    for (size_t i = 0; i < lines.size(); ++i)
      if (lines[i].find("\"key\": \"" + std::string(key) + "\"") != std::string::npos && nth-- == 0)
        return static_cast<int64_t>(i) + 1;
    throw std::runtime_error("no record " + std::string(key));
  }
  int64_t count(std::string_view key) const {
    int64_t n = 0;
    for (const auto& l : lines) n += l.find("\"key\": \"" + std::string(key) + "\"") != std::string::npos;
    return n;
  }
  mllog::Record record(int64_t line) const { return mllog::parse_line(lines.at(line - 1), line); }
  void put(int64_t line, const mllog::Record& r) {
    lines.at(line - 1) = mllog::format_line(r.time_ms, r.event_type, r.key, r.value, r.metadata);
  }

  void set_value(std::string_view key, const nlohmann::json& value, int nth = 0) {
    auto line = line_of(key, nth);
    auto r = record(line);
    r.value = value;
    put(line, r);
  }
  void set_metadata(std::string_view key, const std::string& field, const nlohmann::json& v, int nth = 0) {
    auto line = line_of(key, nth);
    auto r = record(line);
    r.metadata[field] = v;
    put(line, r);
  }
  void erase_metadata(std::string_view key, const std::string& field, int nth = 0) {
    auto line = line_of(key, nth);
    auto r = record(line);
    r.metadata.erase(field);
    put(line, r);
  }
  void set_time(std::string_view key, int64_t time_ms, int nth = 0) {
    auto line = line_of(key, nth);
    auto r = record(line);
    r.time_ms = time_ms;
    put(line, r);
  }
  void erase(std::string_view key, int nth = 0) { lines.erase(lines.begin() + (line_of(key, nth) - 1)); }
  // Inserts a copy of the record right after it; returns the copy's line.
  int64_t duplicate(std::string_view key, int nth = 0) {
    auto line = line_of(key, nth);
    lines.insert(lines.begin() + line, lines[line - 1]);
    return line + 1;
  }
  void insert_at(int64_t line, std::string text) { lines.insert(lines.begin() + (line - 1), std::move(text)); }
  void swap_lines(int64_t a, int64_t b) { std::swap(lines.at(a - 1), lines.at(b - 1)); }
};

// Writes a compliant closed-division run: init block, init_stop, run_start, one block per step,
// evals at exactly the eval points, run_stop.
inline LogLines simulate_run(const SimulatedRun& run) {
  namespace k = mllog::keys;
  LogLines out;
  int64_t now = run.start_ms;
  mllog::Logger log({.sink = [&](const std::string& line) { out.lines.push_back(line); },
                     .clock = [&] { return now; }});
  auto h = mllog::closed_division_run(run.global_batch_size, run.seed, rules::kValidationTasks,
                                      /*train_samples=*/60 * run.global_batch_size, /*max_steps=*/60,
                                      /*gradient_accumulation_steps=*/4, "Example Org", "1xTest");
  mllog::write_init_block(log, h);
  now += run.init_minutes * 60 * 1000;
  log.end(k::kInitStop);
  now += 10;
  log.start(k::kRunStart);
  const int64_t gbs = run.global_batch_size;
  size_t evals = 0;
  for (int64_t step = 1; evals < run.accuracies.size(); ++step) {
    log.start(k::kBlockStart, {{"samples_count", (step - 1) * gbs}});
    now += run.step_ms;
    log.end(k::kBlockStop, {{"samples_count", step * gbs}});
    if (rules::is_eval_point(gbs, step * gbs)) {
      log.start(k::kEvalStart, {{"samples_count", step * gbs}});
      now += run.eval_ms;
      log.point(k::kEvalAccuracy, run.accuracies[evals++], {{"samples_count", step * gbs}});
      log.end(k::kEvalStop, {{"samples_count", step * gbs}});
    }
  }
  now += 1000;
  log.end(k::kRunStop, {{"status", run.status}});
  return out;
}

// Minutes from run_start to run_stop of simulate_run(run), computed from its parameters.
inline double expected_minutes(const SimulatedRun& run) {
  const int64_t first_step = rules::first_eval_samples(run.global_batch_size) / run.global_batch_size;
  const int64_t steps = first_step + static_cast<int64_t>(run.accuracies.size()) - 1;
  const int64_t ms = steps * run.step_ms + static_cast<int64_t>(run.accuracies.size()) * run.eval_ms + 1000;
  return static_cast<double>(ms) / 60000.0;
}

}  // namespace mlpt::test
