#include "core/check/summary.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::check {

namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// Violations that make a run unusable, i.e. all but "did not reach the target".
std::vector<Violation> blocking_violations(const LogReport& rep) {
  std::vector<Violation> out;
  for (const auto& v : rep.violations())
    if (v.rule != kTargetRule) out.push_back(v);
  return out;
}

}  // namespace

double olympic_average(const std::vector<std::optional<double>>& minutes) {
  const auto n = static_cast<int64_t>(minutes.size());
  if (n < rules::kRunsPerSubmission)
    throw Error(MLPT_FAILED_PRECONDITION,
                "the olympic average needs at least " + std::to_string(rules::kRunsPerSubmission) +
                    " runs (the fastest and the slowest are dropped); got " + std::to_string(n));
  const auto failed = std::count_if(minutes.begin(), minutes.end(), [](const auto& m) { return !m; });
  if (failed > rules::kMaxNonConvergedRuns)
    throw Error(MLPT_FAILED_PRECONDITION,
                std::to_string(failed) + " of " + std::to_string(n) +
                    " runs did not converge; at most " + std::to_string(rules::kMaxNonConvergedRuns) +
                    " may (it is dropped as the slowest)");
  std::vector<double> t;
  for (const auto& m : minutes) t.push_back(m ? *m : std::numeric_limits<double>::infinity());
  std::sort(t.begin(), t.end());
  double sum = 0;
  for (size_t i = 1; i + 1 < t.size(); ++i) sum += t[i];
  return sum / static_cast<double>(t.size() - 2);
}

Summary summarize(std::vector<LogReport> runs) {
  Summary s;
  s.runs = std::move(runs);
  const auto n = static_cast<int64_t>(s.runs.size());
  if (n != rules::kRunsPerSubmission)
    s.notes.push_back(std::to_string(n) + " run(s); the benchmark requires exactly " +
                      std::to_string(rules::kRunsPerSubmission) + " (a score from another count is not a valid submission)");

  std::vector<std::string> problems;
  std::map<int64_t, std::string> seeds;
  for (const auto& run : s.runs) {
    if (run.resumed_from_step)
      problems.push_back(run.source + " resumes a run from its step-" + std::to_string(*run.resumed_from_step) +
                         " checkpoint; a resumed run cannot be scored (each run is timed from step 0 in one go): rerun it from the start");
    auto blocking = blocking_violations(run);
    if (!blocking.empty()) {
      const auto& v = blocking.front();
      problems.push_back(run.source + " is not compliant (" + std::to_string(blocking.size()) +
                         " violation(s), first: " + (v.line ? "line " + std::to_string(v.line) + ": " : "") + v.message + ")");
    }
    if (run.seed) {
      auto [it, inserted] = seeds.emplace(*run.seed, run.source);
      if (!inserted)
        problems.push_back("seed " + std::to_string(*run.seed) + " is used by both " + it->second + " and " +
                           run.source + " (seeds must be unique per run)");
    }
    if (run.division != s.runs.front().division)
      problems.push_back(run.source + " is " + std::string(to_string(run.division)) + " division, " +
                         s.runs.front().source + " is " + std::string(to_string(s.runs.front().division)));
  }
  if (!problems.empty()) {
    s.refusal = problems.front();
    for (size_t i = 1; i < problems.size(); ++i) s.refusal += "; " + problems[i];
    return s;
  }
  std::vector<std::optional<double>> minutes;
  for (const auto& run : s.runs) minutes.push_back(run.time_to_train_minutes);
  try {
    s.score_minutes = olympic_average(minutes);
  } catch (const Error& e) {
    s.refusal = e.what();
  }
  return s;
}

Summary summarize_files(const std::vector<std::filesystem::path>& logs, const CheckOptions& options) {
  std::vector<LogReport> runs;
  for (const auto& path : logs) runs.push_back(check_log(mllog::parse_log_file(path), options));
  return summarize(std::move(runs));
}

nlohmann::json to_json(const Summary& s) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : s.runs) {
    runs.push_back({{"source", r.source},
                    {"division", std::string(to_string(r.division))},
                    {"compliant", blocking_violations(r).empty()},
                    {"converged", r.converged()},
                    {"seed", r.seed ? nlohmann::json(*r.seed) : nlohmann::json(nullptr)},
                    {"global_batch_size", r.global_batch_size ? nlohmann::json(*r.global_batch_size) : nlohmann::json(nullptr)},
                    {"status", r.run_stop_status ? nlohmann::json(*r.run_stop_status) : nlohmann::json(nullptr)},
                    {"time_to_train_minutes",
                     r.time_to_train_minutes ? nlohmann::json(*r.time_to_train_minutes) : nlohmann::json(nullptr)}});
  }
  return {{"benchmark", std::string(rules::kBenchmarkName)},
          {"runs", runs},
          {"scored", s.scored()},
          {"score_minutes", s.score_minutes ? nlohmann::json(*s.score_minutes) : nlohmann::json(nullptr)},
          {"refusal", s.refusal.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.refusal)},
          {"notes", s.notes}};
}

std::string format_summary(const Summary& s) {
  std::ostringstream out;
  out << rules::kBenchmarkName << ": " << s.runs.size() << " run(s)\n\n";
  out << "  #  SEED        GBS   STATUS    CONVERGED  COMPLIANT  MINUTES     LOG\n";
  int i = 0;
  for (const auto& r : s.runs) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-2d %-11s %-5s %-9s %-10s %-10s %-11s ", ++i,
                  r.seed ? std::to_string(*r.seed).c_str() : "-",
                  r.global_batch_size ? std::to_string(*r.global_batch_size).c_str() : "-",
                  r.run_stop_status ? r.run_stop_status->c_str() : "-", r.converged() ? "yes" : "no",
                  blocking_violations(r).empty() ? "yes" : "no",
                  r.time_to_train_minutes ? num(*r.time_to_train_minutes).c_str() : "-");
    out << line << r.source << "\n";
  }
  for (const auto& n : s.notes) out << "\nnote: " << n << "\n";
  if (s.scored())
    out << "\nscore (olympic average, fastest and slowest dropped): " << num(*s.score_minutes) << " min\n";
  else
    out << "\nno score: " << s.refusal << "\n";
  return out.str();
}

}  // namespace mlpt::check
