#include "core/check/log_checker.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/mllog/keys.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::check {

std::string_view to_string(Division d) { return d == Division::open ? "open" : "closed"; }

std::optional<Division> parse_division(std::string_view text) {
  if (text == rules::kDivisionClosed) return Division::closed;
  if (text == rules::kDivisionOpen) return Division::open;
  return std::nullopt;
}

CheckOptions parse_check_options(const std::optional<std::string>& division,
                                 const std::optional<std::string>& eval_samples) {
  CheckOptions options;
  if (division) {
    options.division = parse_division(*division);
    if (!options.division) throw Error("--division must be closed or open, got '" + *division + "'");
  }
  if (eval_samples) {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(*eval_samples, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != eval_samples->size() || n <= 0)
      throw Error("--eval-samples must be a positive integer, got '" + *eval_samples + "'");
    options.expected_eval_samples = n;
  }
  return options;
}

bool LogReport::compliant() const {
  return std::all_of(rules.begin(), rules.end(),
                     [](const RuleResult& r) { return r.passed() || !r.counts_for_rules(); });
}

bool LogReport::checker_compliant() const {
  return std::all_of(rules.begin(), rules.end(),
                     [](const RuleResult& r) { return r.passed() || !r.counts_for_checker(); });
}

namespace {
std::vector<Violation> collect(const std::vector<RuleResult>& rules,
                               const std::function<bool(const RuleResult&)>& counts) {
  std::vector<Violation> all;
  for (const auto& r : rules)
    if (counts(r)) all.insert(all.end(), r.violations.begin(), r.violations.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const Violation& a, const Violation& b) { return a.line < b.line; });
  return all;
}
}  // namespace

std::vector<Violation> LogReport::violations() const {
  return collect(rules, [](const RuleResult& r) { return r.counts_for_rules(); });
}
std::vector<Violation> LogReport::checker_violations() const {
  return collect(rules, [](const RuleResult& r) { return r.counts_for_checker(); });
}
std::vector<Violation> LogReport::warnings() const {
  return collect(rules, [](const RuleResult& r) { return r.stricter; });
}

namespace {

using mllog::EventType;
using mllog::Record;
using nlohmann::json;
namespace k = mllog::keys;
namespace r = rules;

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string at_line(int64_t line) { return "line " + std::to_string(line); }

std::optional<double> as_number(const json& v) {
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

// An integer, also when written as 256.0 (some loggers format every number as a float).
std::optional<int64_t> as_integer(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// A value check returns what is wrong, or nothing.
using ValueCheck = std::function<std::optional<std::string>(const json&)>;

ValueCheck equals_number(double expected) {
  return [expected](const json& v) -> std::optional<std::string> {
    auto d = as_number(v);
    if (!d) return "not a number; expected " + num(expected);
    if (*d != expected) return "expected " + num(expected);
    return std::nullopt;
  };
}

ValueCheck near_number(std::function<std::optional<double>()> expected, std::string formula) {
  return [expected, formula](const json& v) -> std::optional<std::string> {
    auto want = expected();
    if (!want) return std::nullopt;  // GBS unknown: reported by the global_batch_size rule
    auto d = as_number(v);
    if (!d) return "not a number; expected " + formula + " = " + num(*want);
    if (!r::within_tolerance(*d, *want))
      return "expected " + formula + " = " + num(*want) + " within " + num(r::kHyperparameterTolerance) +
             " (off by " + num(std::fabs(*d - *want)) + ")";
    return std::nullopt;
  };
}

ValueCheck equals_string(std::string_view expected) {
  std::string e(expected);
  return [e](const json& v) -> std::optional<std::string> {
    if (!v.is_string() || v.get<std::string>() != e) return "expected \"" + e + "\"";
    return std::nullopt;
  };
}

ValueCheck equals_integer(int64_t expected) {
  return [expected](const json& v) -> std::optional<std::string> {
    auto i = as_integer(v);
    if (!i || *i != expected) return "expected " + std::to_string(expected);
    return std::nullopt;
  };
}

ValueCheck positive_integer() {
  return [](const json& v) -> std::optional<std::string> {
    auto i = as_integer(v);
    if (!i) return std::string("must be an integer");
    if (*i <= 0) return std::string("must be > 0");
    return std::nullopt;
  };
}

ValueCheck any_integer() {
  return [](const json& v) -> std::optional<std::string> {
    if (!as_integer(v)) return std::string("must be an integer");
    return std::nullopt;
  };
}

ValueCheck non_empty_string() {
  return [](const json& v) -> std::optional<std::string> {
    if (!v.is_string() || v.get<std::string>().empty()) return std::string("must be a non-empty string");
    return std::nullopt;
  };
}

ValueCheck all_of(std::vector<ValueCheck> checks) {
  return [checks](const json& v) -> std::optional<std::string> {
    for (const auto& c : checks)
      if (auto e = c(v)) return e;
    return std::nullopt;
  };
}

const std::set<std::string_view>& known_keys() {
  static const std::set<std::string_view> known = [] {
    std::set<std::string_view> s(k::kHyperparameterKeys.begin(), k::kHyperparameterKeys.end());
    for (auto key : {k::kCacheClear, k::kInitStart, k::kSubmissionBenchmark, k::kSubmissionOrg,
                     k::kSubmissionDivision, k::kSubmissionStatus, k::kSubmissionPlatform,
                     k::kInitStop, k::kRunStart, k::kBlockStart, k::kBlockStop, k::kEvalStart,
                     k::kEvalAccuracy, k::kEvalStop, k::kRunStop, k::kPrecisionLinear,
                     k::kPrecisionAttention, k::kPrecisionCommunication, k::kTensorParallelism,
                     k::kPipelineParallelism, k::kContextParallelism, k::kExpertParallelism,
                     k::kMaxTrajectoryAgeSteps, k::kTimeAlreadySpentMs})
      s.insert(key);
    s.insert(k::kFrameworkKeys.begin(), k::kFrameworkKeys.end());
    return s;
  }();
  return known;
}

class Checker {
 public:
  Checker(const mllog::ParsedLog& log, const CheckOptions& options) : log_(log), options_(options) {
    for (const auto& rec : log_.records) by_key_[rec.key].push_back(&rec);
    rep_.source = log_.source;
  }

  LogReport run() {
    choose_division();
    check_parse();
    check_submission();
    check_structure();
    check_hyperparameters();
    check_evals();
    if (closed()) check_key_order();
    repeats_.evidence =
        repeats_.violations.empty() ? "none" : std::to_string(repeats_.violations.size()) + " repeat(s)";
    push(std::move(repeats_));
    mark_stricter();
    add_findings();
    note_resume();
    time_to_train();
    return std::move(rep_);
  }

 private:
  const mllog::ParsedLog& log_;
  CheckOptions options_;
  LogReport rep_;
  std::map<std::string, std::vector<const Record*>, std::less<>> by_key_;
  const Record* declared_division_ = nullptr;
  const Record* run_start_ = nullptr;  // the first; counts are checked separately
  const Record* run_stop_ = nullptr;
  // Exactly-once keys logged again with the same value every time: the MLCommons checker warns.
  RuleResult repeats_{
      "repeated_key", "an exactly-once key is not logged again with the same value", "", {}, true};

  bool closed() const { return rep_.division == Division::closed; }
  const std::vector<const Record*>& occurrences(std::string_view key) {
    static const std::vector<const Record*> none;
    auto it = by_key_.find(key);
    return it == by_key_.end() ? none : it->second;
  }
  static void add(RuleResult& rule, int64_t line, std::string message) {
    rule.violations.push_back({rule.id, line, std::move(message)});
  }
  void push(RuleResult rule) { rep_.rules.push_back(std::move(rule)); }

  // The i-th occurrence (i > 0) of an exactly-once key: when every occurrence has the same value
  // the MLCommons checker only warns; otherwise it fails, and so does the key's rule.
  void repeated(RuleResult& rule, std::string_view key, size_t i) {
    const auto& occ = occurrences(key);
    const bool same =
        std::all_of(occ.begin(), occ.end(), [&](const Record* r) { return r->value == occ.front()->value; });
    if (same)
      add(repeats_, occ[i]->line,
          std::string(key) + " logged again with the same value (first at " + at_line(occ.front()->line) +
              "); the MLCommons checker warns");
    else
      add(rule, occ[i]->line,
          std::string(key) + " logged again with a different value (first at " + at_line(occ.front()->line) +
              "); it must be logged exactly once");
  }

  // A requirement on a key's values that only one side has (the key's own rule checks its count).
  void value_rule(std::string id, std::string_view key, std::string description, const ValueCheck& check,
                  Authority who) {
    RuleResult rule{std::move(id), std::move(description), "", {}};
    rule.authority = who;
    const auto& occ = occurrences(key);
    rule.evidence = occ.empty() ? "not logged (reported by " + std::string(key) + ")"
                                : at_line(occ.front()->line) + ": " + show(occ.front()->value);
    for (const auto* rec : occ)
      if (auto err = check(rec->value))
        add(rule, rec->line, std::string(key) + " = " + show(rec->value) + ": " + *err);
    push(std::move(rule));
  }

  std::optional<int64_t> gbs() const { return rep_.global_batch_size; }

  // Rules the MLCommons checker (training_6.1.0) does not have: their failures are warnings.
  void mark_stricter() {
    for (auto& rule : rep_.rules)
      if (rule.id == k::kSubmissionStatus || rule.id == k::kSeed || rule.id == k::kTargetAccuracy ||
          rule.id == k::kOptEndLearningRate)
        rule.stricter = true;
  }

  // ---- Division --------------------------------------------------------------------------------
  void choose_division() {
    const auto& occ = occurrences(k::kSubmissionDivision);
    if (!occ.empty()) declared_division_ = occ.front();
    std::optional<Division> declared;
    if (declared_division_ && declared_division_->value.is_string())
      declared = parse_division(declared_division_->value.get<std::string>());
    rep_.division = options_.division.value_or(declared.value_or(Division::closed));
    // GBS is needed by several formulas; take the first valid one (duplicates are violations).
    for (const auto* rec : occurrences(k::kGlobalBatchSize))
      if (auto g = as_integer(rec->value); g && *g > 0) {
        rep_.global_batch_size = *g;
        break;
      }
    for (const auto* rec : occurrences(k::kSeed))
      if (auto s = as_integer(rec->value)) {
        rep_.seed = *s;
        break;
      }
  }

  // ---- One rule per key that must appear exactly once -------------------------------------------
  void key_rule(std::string_view key, std::string description, ValueCheck check,
                bool required = true) {
    RuleResult rule{std::string(key), std::move(description), "", {}};
    const auto& occ = occurrences(key);
    if (occ.empty()) {
      rule.evidence = "not logged";
      if (required) add(rule, 0, std::string(key) + " is missing (must be logged exactly once)");
      push(std::move(rule));
      return;
    }
    rule.evidence = at_line(occ.front()->line) + ": " + show(occ.front()->value);
    for (size_t i = 1; i < occ.size(); ++i) {
      rule.evidence += "; again at " + at_line(occ[i]->line);
      repeated(rule, key, i);
    }
    if (check)
      for (const auto* rec : occ)
        if (auto err = check(rec->value))
          add(rule, rec->line, std::string(key) + " = " + show(rec->value) + ": " + *err);
    push(std::move(rule));
  }

  // ---- Rules -----------------------------------------------------------------------------------
  void check_parse() {
    RuleResult rule{"parse", "every :::MLLOG line is a JSON object with time_ms, event_type, key, value, metadata",
                    std::to_string(log_.records.size()) + " records in " +
                        std::to_string(log_.total_lines) + " lines, " +
                        std::to_string(log_.errors.size()) + " malformed",
                    {}};
    for (const auto& e : log_.errors) add(rule, e.line, "malformed :::MLLOG line: " + e.message);
    push(std::move(rule));
  }

  void check_submission() {
    key_rule(k::kSubmissionBenchmark, "exactly once, \"" + std::string(r::kBenchmarkName) + "\"",
             equals_string(r::kBenchmarkName));
    key_rule(k::kSubmissionOrg, "exactly once, non-empty", non_empty_string());
    key_rule(k::kSubmissionDivision, "exactly once, \"closed\" or \"open\", the division checked",
             [this](const json& v) -> std::optional<std::string> {
               std::optional<Division> d;
               if (v.is_string()) d = parse_division(v.get<std::string>());
               if (!d) return std::string("must be \"closed\" or \"open\"");
               if (*d != rep_.division)
                 return "the log declares the " + std::string(to_string(*d)) +
                        " division but is checked as " + std::string(to_string(rep_.division));
               return std::nullopt;
             });
    key_rule(k::kSubmissionStatus, "exactly once, non-empty", non_empty_string());
    key_rule(k::kSubmissionPlatform, "exactly once, non-empty", non_empty_string());
  }

  void check_structure() {
    RuleResult cache{"cache_clear", "at least once, before the run", "", {}};
    RuleResult init_start{"init_start", "at least once, none after init_stop or run_start", "", {}};
    RuleResult init_stop{"init_stop", "exactly once, after an init_start and before run_start", "", {}};
    const int64_t limit_min = r::init_time_limit_minutes(!closed());
    RuleResult init_time{"init_time",
                         "init_stop less than " + std::to_string(limit_min) +
                             " min after the first init_start",
                         "", {}};
    RuleResult run_start{"run_start", "at least once, after init_stop", "", {}};
    RuleResult run_start_once{"run_start_once", "exactly once (a resumed or restarted run logs a second one)", "", {}, true};
    RuleResult run_stop{"run_stop", "exactly once, after run_start, with metadata status", "", {}};
    RuleResult run_stop_status{"run_stop_status", "run_stop status is success or aborted", "", {}, true};
    RuleResult blocks{"blocks", "block_start and block_stop logged, after run_start, with samples_count >= 0", "", {}};
    RuleResult eval_markers{"eval_markers", "eval_start and eval_stop carry samples_count", "", {}};

    bool init_started = false, init_stopped = false, run_started = false, run_stopped = false;
    std::optional<int64_t> first_init_ms;
    const Record* first_init_stop = nullptr;
    int n_cache = 0, n_init_start = 0, n_init_stop = 0, n_run_start = 0, n_run_stop = 0;
    int n_block_start = 0, n_block_stop = 0, n_eval_markers = 0;
    const std::string samples(k::kMetaSamplesCount), status_key(k::kMetaStatus);

    for (const auto& rec : log_.records) {
      const std::string& key = rec.key;
      if (key == k::kCacheClear) {
        ++n_cache;
        if (run_started) add(cache, rec.line, "cache_clear after run_start (line " + std::to_string(run_start_->line) + ")");
      } else if (key == k::kInitStart) {
        ++n_init_start;
        if (init_stopped) add(init_start, rec.line, "init_start after init_stop (" + at_line(first_init_stop->line) + ")");
        else if (run_started) add(init_start, rec.line, "init_start after run_start");
        init_started = true;
        if (!first_init_ms || rec.time_ms < *first_init_ms) first_init_ms = rec.time_ms;
      } else if (key == k::kInitStop) {
        ++n_init_stop;
        if (n_init_stop > 1)
          repeated(init_stop, k::kInitStop, n_init_stop - 1);
        else
          first_init_stop = &rec;
        if (!init_started) add(init_stop, rec.line, "init_stop before any init_start");
        if (run_started) add(init_stop, rec.line, "init_stop after run_start (" + at_line(run_start_->line) + ")");
        if (first_init_ms) {
          double minutes = static_cast<double>(rec.time_ms - *first_init_ms) / 60000.0;
          if (n_init_stop == 1)
            init_time.evidence = "init took " + num(minutes) + " min (first init_start → " + at_line(rec.line) + ")";
          if (!(rec.time_ms - *first_init_ms < limit_min * 60 * 1000))
            add(init_time, rec.line,
                "init_stop " + num(minutes) + " min after the first init_start; the " +
                    std::string(to_string(rep_.division)) + " division allows less than " +
                    std::to_string(limit_min) + " min");
        }
        init_stopped = true;
      } else if (key == k::kRunStart) {
        ++n_run_start;
        if (n_run_start > 1)
          add(run_start_once, rec.line, "run_start logged again (first at " + at_line(run_start_->line) + ")");
        else
          run_start_ = &rec;
        if (!init_stopped) add(run_start, rec.line, "run_start before init_stop");
        run_started = true;
      } else if (key == k::kRunStop) {
        ++n_run_stop;
        if (n_run_stop > 1)
          repeated(run_stop, k::kRunStop, n_run_stop - 1);
        else
          run_stop_ = &rec;
        if (!run_started) add(run_stop, rec.line, "run_stop before run_start");
        if (!rec.metadata.contains(status_key)) {
          add(run_stop, rec.line, "run_stop has no metadata \"status\" (success or aborted)");
        } else {
          const auto& st = rec.metadata[status_key];
          if (!st.is_string() || (st.get<std::string>() != k::kStatusSuccess &&
                                  st.get<std::string>() != k::kStatusAborted))
            add(run_stop_status, rec.line, "run_stop status " + show(st) + " is neither \"success\" nor \"aborted\"");
        }
        run_stopped = true;
      } else if (key == k::kBlockStart || key == k::kBlockStop) {
        (key == k::kBlockStart ? n_block_start : n_block_stop)++;
        if (!run_started) add(blocks, rec.line, key + " before run_start");
        if (!rec.metadata.contains(samples)) {
          add(blocks, rec.line, key + " has no metadata samples_count");
        } else {
          auto c = as_integer(rec.metadata[samples]);
          if (!c || *c < 0)
            add(blocks, rec.line, key + " samples_count " + show(rec.metadata[samples]) + " is not an integer >= 0");
        }
      } else if (key == k::kEvalStart || key == k::kEvalStop) {
        ++n_eval_markers;
        if (!rec.metadata.contains(samples)) add(eval_markers, rec.line, key + " has no metadata samples_count");
      }
    }
    (void)run_stopped;

    auto evidence_lines = [this](std::string_view key) {
      const auto& occ = occurrences(key);
      if (occ.empty()) return std::string("not logged");
      std::string s = at_line(occ.front()->line);
      if (occ.size() > 1) s += " (+" + std::to_string(occ.size() - 1) + " more)";
      return s;
    };
    cache.evidence = evidence_lines(k::kCacheClear);
    if (n_cache == 0) add(cache, 0, "cache_clear is missing (must be logged at least once)");
    init_start.evidence = evidence_lines(k::kInitStart);
    if (n_init_start == 0) add(init_start, 0, "init_start is missing");
    init_stop.evidence = evidence_lines(k::kInitStop);
    if (n_init_stop == 0) add(init_stop, 0, "init_stop is missing (must be logged exactly once)");
    if (init_time.evidence.empty()) {
      init_time.evidence = "not measurable";
      if (n_init_stop == 0 || n_init_start == 0)
        add(init_time, 0, "init time cannot be measured without init_start and init_stop");
    }
    run_start.evidence = evidence_lines(k::kRunStart);
    run_start_once.evidence = std::to_string(n_run_start) + " run_start";
    if (n_run_start == 0) add(run_start, 0, "run_start is missing (must be logged exactly once)");
    run_stop.evidence = evidence_lines(k::kRunStop);
    if (run_stop_ && run_stop_->metadata.contains(status_key))
      run_stop.evidence += ", status " + show(run_stop_->metadata[status_key]);
    if (n_run_stop == 0) add(run_stop, 0, "run_stop is missing (must be logged exactly once)");
    blocks.evidence = std::to_string(n_block_start) + " block_start, " + std::to_string(n_block_stop) + " block_stop";
    if (n_block_start == 0) add(blocks, 0, "no block_start logged");
    if (n_block_stop == 0) add(blocks, 0, "no block_stop logged");
    eval_markers.evidence = std::to_string(n_eval_markers) + " eval_start/eval_stop";

    if (run_start_) rep_.run_start_ms = run_start_->time_ms;
    if (run_stop_) {
      rep_.run_stop_ms = run_stop_->time_ms;
      if (run_stop_->metadata.contains(status_key) && run_stop_->metadata[status_key].is_string())
        rep_.run_stop_status = run_stop_->metadata[status_key].get<std::string>();
    }
    run_stop_status.evidence = run_stop.evidence;
    for (auto* rule : {&cache, &init_start, &init_stop, &init_time, &run_start, &run_start_once, &run_stop, &run_stop_status,
                       &blocks, &eval_markers})
      push(std::move(*rule));
  }

  void check_hyperparameters() {
    const bool c = closed();
    auto lr = [this]() -> std::optional<double> {
      if (!gbs()) return std::nullopt;
      return r::learning_rate(*gbs());
    };
    auto clip = [this]() -> std::optional<double> {
      if (!gbs()) return std::nullopt;
      return r::gradient_clip_norm(*gbs());
    };
    ValueCheck none;
    key_rule(k::kSeed, "exactly once, an integer", any_integer());
    key_rule(k::kMaxSteps, "exactly once, an integer", any_integer());
    key_rule(k::kGlobalBatchSize, "exactly once, a positive integer", positive_integer());
    if (c)
      value_rule(
          "global_batch_size_table", k::kGlobalBatchSize,
          "closed division: GBS one of 256, 512, 1024 (the rules' table; the MLCommons checker accepts any)",
          [](const json& v) -> std::optional<std::string> {
            auto g = as_integer(v);
            if (g && !r::is_allowed_global_batch_size(*g))
              return std::string("the closed division's table has only 256, 512 and 1024 (§2)");
            return std::nullopt;
          },
          Authority::rules_only);
    key_rule(k::kMaxSequenceLength, "exactly once, " + std::to_string(r::kMaxSequenceLength),
             equals_integer(r::kMaxSequenceLength));
    key_rule(k::kTrainSamples, "exactly once, a positive integer", positive_integer());
    key_rule(k::kEvalSamples, "exactly once, a positive integer", positive_integer());
    const int64_t tasks = options_.expected_eval_samples.value_or(r::kValidationTasks);
    value_rule("eval_samples_rules", k::kEvalSamples,
               "eval_samples == " + std::to_string(tasks) +
                   ", the validation tasks (the merged rules: " + std::to_string(r::kValidationTasks) + ")",
               equals_integer(tasks), Authority::rules_only);
    value_rule("eval_samples_checker", k::kEvalSamples,
               "eval_samples == " + std::to_string(r::kCheckerEvalSamples) + " (the MLCommons checker " +
                   std::string(r::kCheckerVersion) + ", from before the rule change)",
               equals_integer(r::kCheckerEvalSamples), Authority::checker_only);
    key_rule(k::kInitCheckpointStep, "exactly once, 0 (a run starts from the initial checkpoint)",
             [](const json& v) -> std::optional<std::string> {
               auto step = as_integer(v);
               if (step && *step > 0)
                 return "this log resumes a run from its step-" + std::to_string(*step) +
                        " checkpoint; MLPerf times a run from step 0 in one go, so a resumed run is not a compliant "
                        "result (its time to train counts the earlier attempts, for the record; rerun from step 0 to score)";
               if (!step || *step != r::kInitCheckpointStep) return "expected " + std::to_string(r::kInitCheckpointStep);
               return std::nullopt;
             });
    key_rule(k::kOptName, "exactly once, \"adamw\"", equals_string(r::kOptimizerName));
    if (c) {
      key_rule(k::kOptBaseLearningRate, "exactly once, 1e-6·sqrt(GBS/256) within 1e-9",
               near_number(lr, "1e-6·sqrt(GBS/256)"));
      key_rule(k::kOptEndLearningRate, "exactly once, = base LR (constant schedule) within 1e-9",
               near_number(lr, "1e-6·sqrt(GBS/256)"));
      key_rule(k::kOptAdamwBeta1, "exactly once, 0.9", equals_number(r::kAdamBeta1));
      key_rule(k::kOptAdamwBeta2, "exactly once, 0.999", equals_number(r::kAdamBeta2));
      key_rule(k::kOptAdamwEpsilon, "exactly once, 1e-8", equals_number(r::kAdamEpsilon));
      key_rule(k::kOptAdamwWeightDecay, "exactly once, 0.0", equals_number(r::kWeightDecay));
      key_rule(k::kOptGradientClipNorm, "exactly once, 0.125·sqrt(256/GBS) within 1e-9",
               near_number(clip, "0.125·sqrt(256/GBS)"));
      key_rule(k::kOptLearningRateWarmupSteps, "exactly once, 0", equals_integer(r::kWarmupSteps));
      key_rule(k::kOptLearningRateDecaySchedule, "exactly once, \"constant\"",
               equals_string(r::kLearningRateSchedule));
      key_rule(k::kTrainTemperature, "exactly once, 1.0", equals_number(r::kTrainTemperature));
      key_rule(k::kTrainTopP, "exactly once, 1.0", equals_number(r::kTrainTopP));
      key_rule(k::kValidationTemperature, "exactly once, 0.1", equals_number(r::kValidationTemperature));
      key_rule(k::kValidationTopP, "exactly once, 0.95", equals_number(r::kValidationTopP));
      key_rule(k::kNumPromptsPerStep, "exactly once, a positive integer", positive_integer());
      key_rule(k::kNumGenerationsPerPrompt, "exactly once, 16", equals_integer(r::kGenerationsPerPrompt));
      key_rule(k::kTargetAccuracy, "exactly once, 0.69", equals_number(r::kTargetAccuracy));
      key_rule(k::kGradientAccumulationSteps, "exactly once, > 0", positive_integer());
      check_gbs_split();
    } else {
      for (auto key : {k::kOptBaseLearningRate, k::kOptEndLearningRate, k::kOptAdamwBeta1,
                       k::kOptAdamwBeta2, k::kOptAdamwEpsilon, k::kOptAdamwWeightDecay,
                       k::kOptGradientClipNorm, k::kOptLearningRateWarmupSteps,
                       k::kOptLearningRateDecaySchedule, k::kTrainTemperature, k::kTrainTopP,
                       k::kValidationTemperature, k::kValidationTopP, k::kTargetAccuracy})
        key_rule(key, "exactly once (value free in the open division)", none);
      key_rule(k::kNumPromptsPerStep, "exactly once, a positive integer", positive_integer());
      key_rule(k::kNumGenerationsPerPrompt, "exactly once, a positive integer", positive_integer());
      key_rule(k::kGradientAccumulationSteps, "if logged: exactly once, > 0", positive_integer(),
               /*required=*/false);
    }
  }

  // GBS == num_prompts_per_step × num_generations_per_prompt (reported on the generations line, as
  // the reference does).
  void check_gbs_split() {
    RuleResult rule{"gbs_split", "global_batch_size == num_prompts_per_step × num_generations_per_prompt", "", {}};
    const auto& p = occurrences(k::kNumPromptsPerStep);
    const auto& g = occurrences(k::kNumGenerationsPerPrompt);
    std::optional<int64_t> prompts = p.empty() ? std::nullopt : as_integer(p.front()->value);
    std::optional<int64_t> gens = g.empty() ? std::nullopt : as_integer(g.front()->value);
    if (!gbs() || !prompts || !gens) {
      rule.evidence = "not checked (a key is missing or invalid; reported by its own rule)";
    } else {
      const int64_t n_prompts = prompts.value_or(0), n_gens = gens.value_or(0), batch = gbs().value_or(0);
      rule.evidence = std::to_string(n_prompts) + " × " + std::to_string(n_gens) + " = " +
                      std::to_string(n_prompts * n_gens) + ", GBS " + std::to_string(batch);
      if (n_prompts * n_gens != batch)
        add(rule, g.front()->line,
            "global_batch_size " + std::to_string(batch) + " != num_prompts_per_step " +
                std::to_string(n_prompts) + " × num_generations_per_prompt " + std::to_string(n_gens));
    }
    push(std::move(rule));
  }

  void check_evals() {
    RuleResult values{"eval_accuracy", "at least once; each has samples_count and a value in [0, 1]", "", {}};
    RuleResult schedule{"eval_schedule", "", "", {}};
    RuleResult target{std::string(kTargetRule),
                      "at least one eval_accuracy > " + num(r::kTargetAccuracy) + " (pass@4)", "", {}};
    const std::string samples(k::kMetaSamplesCount);
    std::optional<int64_t> next;
    if (gbs()) {
      next = r::first_eval_samples(*gbs());
      schedule.description = "samples_count of each eval_accuracy = the next eval point: first " +
                             std::to_string(*next) + " = GBS·ceil(2.5 + 3840/GBS), then +" +
                             std::to_string(*gbs());
    } else {
      schedule.description = "samples_count of each eval_accuracy = the next eval point";
      schedule.evidence = "not checked (no valid global_batch_size)";
    }
    int n = 0, on_schedule = 0;
    const Record* best = nullptr;
    const Record* first_over = nullptr;
    const int64_t start_line = run_start_ ? run_start_->line : INT64_MAX;
    const int64_t stop_line = run_stop_ ? run_stop_->line : INT64_MAX;
    for (const auto* rec : occurrences(k::kEvalAccuracy)) {
      ++n;
      std::optional<int64_t> count;
      if (!rec->metadata.contains(samples)) {
        add(values, rec->line, "eval_accuracy has no metadata samples_count");
      } else {
        count = as_integer(rec->metadata[samples]);
        if (!count) add(values, rec->line, "eval_accuracy samples_count " + show(rec->metadata[samples]) + " is not an integer");
      }
      auto v = as_number(rec->value);
      if (!v) {
        add(values, rec->line, "eval_accuracy value " + show(rec->value) + " is not a number");
      } else if (!(*v >= 0.0 && *v <= 1.0)) {
        add(values, rec->line, "eval_accuracy value " + num(*v) + " is outside [0, 1]");
      } else {
        if (!best || *v > as_number(best->value).value()) best = rec;
        if (r::reached_target(*v)) {
          if (!first_over) {
            first_over = rec;
            target.evidence = "first above target at " + at_line(rec->line) + ": " + num(*v);
          }
          if (!rep_.target_reached_line && rec->line > start_line && rec->line < stop_line) {
            rep_.target_reached_line = rec->line;
            rep_.target_reached_samples = count;
          }
        }
      }
      if (closed() && next) {
        if (!count) {
          add(schedule, rec->line, "eval_accuracy without an integer samples_count; expected " + std::to_string(*next));
        } else if (*count != *next) {
          add(schedule, rec->line,
              "eval_accuracy at samples_count " + std::to_string(*count) + "; the next eval point is " +
                  std::to_string(*next) + " (first at " + std::to_string(r::first_eval_samples(*gbs())) +
                  ", then every " + std::to_string(*gbs()) + ")");
        } else {
          ++on_schedule;
          *next += *gbs();  // advance only on a match, as the reference does
        }
      }
    }
    values.evidence = std::to_string(n) + " eval_accuracy";
    if (best) {
      rep_.best_accuracy = as_number(best->value);
      values.evidence += ", best " + num(*rep_.best_accuracy) + " at " + at_line(best->line);
    }
    if (n == 0) add(values, 0, "no eval_accuracy logged");
    if (gbs() && closed()) schedule.evidence = std::to_string(on_schedule) + " of " + std::to_string(n) + " on schedule";
    if (!first_over) {
      target.evidence = best ? "best " + num(*rep_.best_accuracy) + " at " + at_line(best->line) : "no valid eval_accuracy";
      add(target, 0, "no eval_accuracy above the target " + num(r::kTargetAccuracy) +
                         (best ? " (best " + num(*rep_.best_accuracy) + " at " + at_line(best->line) + ")" : ""));
    }
    push(std::move(values));
    if (closed()) push(std::move(schedule));
    push(std::move(target));
    for (const auto* rec : occurrences(k::kEvalAccuracy))
      if (rec->line < start_line || rec->line > stop_line)
        rep_.findings.push_back({rec->line, "eval_accuracy outside run_start..run_stop; it does not count for time to train"});
  }

  // The MLCommons checker computes the expected LR, clip, batch split and eval points from the keys
  // seen so far: a key logged before the one it depends on fails there (the rules say nothing of order).
  void check_key_order() {
    RuleResult rule{
        "key_order",
        "global_batch_size before opt_base_learning_rate, opt_gradient_clip_norm, num_generations_per_prompt "
        "and eval_accuracy; num_prompts_per_step before num_generations_per_prompt",
        "",
        {}};
    rule.authority = Authority::checker_only;
    struct Dependency {
      std::string_view key, after;
    };
    for (auto [key, after] : {Dependency{k::kOptBaseLearningRate, k::kGlobalBatchSize},
                              Dependency{k::kOptGradientClipNorm, k::kGlobalBatchSize},
                              Dependency{k::kNumGenerationsPerPrompt, k::kGlobalBatchSize},
                              Dependency{k::kNumGenerationsPerPrompt, k::kNumPromptsPerStep},
                              Dependency{k::kEvalAccuracy, k::kGlobalBatchSize}}) {
      const auto& first = occurrences(after);
      if (first.empty()) continue;  // missing: reported by its own rule
      for (const auto* rec : occurrences(key))
        if (rec->line < first.front()->line)
          add(rule, rec->line,
              std::string(key) + " comes before " + std::string(after) + " (" + at_line(first.front()->line) +
                  "); the MLCommons checker " + std::string(r::kCheckerVersion) +
                  " computes its check from " + std::string(after) + " and fails it");
    }
    rule.evidence = rule.violations.empty() ? "in order"
                                            : std::to_string(rule.violations.size()) + " key(s) out of order";
    push(std::move(rule));
  }

  void add_findings() {
    // Disclosure keys some reference revisions require; §6 of our spec does not.
    std::vector<std::string> missing;
    for (auto key : {k::kPrecisionLinear, k::kPrecisionAttention, k::kPrecisionCommunication,
                     k::kTensorParallelism, k::kPipelineParallelism, k::kContextParallelism,
                     k::kExpertParallelism})
      if (occurrences(key).empty()) missing.emplace_back(key);
    if (!missing.empty()) {
      std::string s = "not logged (newer reference rule revisions ask for them, §6 does not):";
      for (const auto& m : missing) s += " " + m;
      rep_.findings.push_back({0, s});
    }
    std::vector<std::string> unknown;
    for (const auto& [key, occ] : by_key_)
      if (!known_keys().count(key)) unknown.push_back(key + " (" + at_line(occ.front()->line) + ")");
    if (!unknown.empty()) {
      std::string s = std::to_string(unknown.size()) + " key(s) outside §6 (allowed):";
      for (const auto& u : unknown) s += " " + u;
      rep_.findings.push_back({0, s});
    }
    // Interval keys written with the wrong event type: harmless for the rules, but a sign of a bug.
    for (const auto& rec : log_.records) {
      bool is_start = rec.key == k::kInitStart || rec.key == k::kRunStart || rec.key == k::kBlockStart || rec.key == k::kEvalStart;
      bool is_end = rec.key == k::kInitStop || rec.key == k::kRunStop || rec.key == k::kBlockStop || rec.key == k::kEvalStop;
      if ((is_start && rec.event_type != EventType::interval_start) ||
          (is_end && rec.event_type != EventType::interval_end))
        rep_.findings.push_back({rec.line, rec.key + " logged as " + std::string(mllog::to_string(rec.event_type)) +
                                               " (the reference writes " + (is_start ? "INTERVAL_START" : "INTERVAL_END") + ")"});
    }
    for (size_t i = 1; i < log_.records.size(); ++i)
      if (log_.records[i].time_ms < log_.records[i - 1].time_ms) {
        rep_.findings.push_back({log_.records[i].line, "time_ms goes backwards (earlier than " +
                                                           at_line(log_.records[i - 1].line) + ")"});
        break;
      }
    if (!closed())
      rep_.findings.push_back({0, "open division: LR/clip formulas, AdamW constants, sampling settings, generations == 16, "
                                  "GBS == prompts × 16, the GBS table and the eval schedule are not checked"});
  }

  // A resumed run: where it started and how long its earlier attempts ran (counted in its time).
  void note_resume() {
    const auto& steps = occurrences(k::kInitCheckpointStep);
    auto step = steps.empty() ? std::nullopt : as_integer(steps.front()->value);
    if (!step || *step <= 0) return;
    rep_.resumed_from_step = *step;
    const auto& spent = occurrences(k::kTimeAlreadySpentMs);
    auto ms = spent.empty() ? std::nullopt : as_integer(spent.front()->value);
    if (ms) rep_.time_already_spent_minutes = static_cast<double>(*ms) / 60000.0;
    rep_.findings.push_back({steps.front()->line, "resumed run: starts from the step-" + std::to_string(*step) + " checkpoint" +
                                                     (ms ? ", after " + num(*rep_.time_already_spent_minutes) + " min in earlier attempts (" +
                                                               at_line(spent.front()->line) + "), which its time to train includes"
                                                         : "; the time its earlier attempts ran is not logged (" +
                                                               std::string(k::kTimeAlreadySpentMs) + "), so its time to train is too short") +
                                                     "; not a scored result"});
  }

  void time_to_train() {
    if (!run_start_ || !run_stop_ || occurrences(k::kRunStart).size() != 1 || occurrences(k::kRunStop).size() != 1) {
      rep_.findings.push_back({0, "no time to train: the log needs exactly one run_start and one run_stop"});
      return;
    }
    if (rep_.run_stop_status != std::string(k::kStatusSuccess)) {
      rep_.findings.push_back({run_stop_->line, "no time to train: run_stop status is " +
                                                    (rep_.run_stop_status ? "\"" + *rep_.run_stop_status + "\"" : std::string("missing")) +
                                                    ", not \"success\""});
      return;
    }
    if (!rep_.target_reached_line) {
      rep_.findings.push_back({run_stop_->line, "no time to train: no eval_accuracy above " + num(r::kTargetAccuracy) +
                                                    " between run_start and run_stop"});
      return;
    }
    rep_.time_to_train_minutes = static_cast<double>(run_stop_->time_ms - run_start_->time_ms) / 60000.0 +
                                 rep_.time_already_spent_minutes.value_or(0.0);
    rep_.findings.push_back({*rep_.target_reached_line,
                             "converged: target reached at " + at_line(*rep_.target_reached_line) +
                                 (rep_.target_reached_samples ? " (samples_count " + std::to_string(*rep_.target_reached_samples) + ")" : "") +
                                 "; time to train " + num(*rep_.time_to_train_minutes) + " min"});
  }
};

}  // namespace

LogReport check_log(const mllog::ParsedLog& log, const CheckOptions& options) {
  return Checker(log, options).run();
}

namespace {
std::string_view authority_name(Authority a) {
  return a == Authority::rules_only ? "rules" : a == Authority::checker_only ? "checker" : "both";
}
}  // namespace

nlohmann::json to_json(const LogReport& rep) {
  json rules = json::array();
  for (const auto& r : rep.rules) {
    json v = json::array();
    for (const auto& x : r.violations) v.push_back({{"line", x.line}, {"message", x.message}});
    rules.push_back({{"id", r.id},
                     {"description", r.description},
                     {"passed", r.passed()},
                     {"stricter", r.stricter},
                     {"authority", std::string(authority_name(r.authority))},
                     {"evidence", r.evidence},
                     {"violations", v}});
  }
  auto listed = [](const std::vector<Violation>& all) {
    json out = json::array();
    for (const auto& x : all) out.push_back({{"rule", x.rule}, {"line", x.line}, {"message", x.message}});
    return out;
  };
  json findings = json::array();
  for (const auto& f : rep.findings) findings.push_back({{"line", f.line}, {"message", f.message}});
  auto opt = [](const auto& o) -> json { return o ? json(*o) : json(nullptr); };
  return {{"source", rep.source},
          {"benchmark", std::string(r::kBenchmarkName)},
          {"division", std::string(to_string(rep.division))},
          {"compliant", rep.compliant()},
          {"rules", rules},
          {"violations", listed(rep.violations())},
          {"warnings", listed(rep.warnings())},
          {"mlcommons_checker",
           {{"version", std::string(r::kCheckerVersion)},
            {"compliant", rep.checker_compliant()},
            {"violations", listed(rep.checker_violations())}}},
          {"findings", findings},
          {"run",
           {{"seed", opt(rep.seed)},
            {"global_batch_size", opt(rep.global_batch_size)},
            {"run_start_ms", opt(rep.run_start_ms)},
            {"run_stop_ms", opt(rep.run_stop_ms)},
            {"status", opt(rep.run_stop_status)},
            {"best_accuracy", opt(rep.best_accuracy)},
            {"target_reached_line", opt(rep.target_reached_line)},
            {"target_reached_samples", opt(rep.target_reached_samples)},
            {"converged", rep.converged()},
            {"resumed_from_step", opt(rep.resumed_from_step)},
            {"time_already_spent_minutes", opt(rep.time_already_spent_minutes)},
            {"time_to_train_minutes", opt(rep.time_to_train_minutes)}}}};
}

std::string format_report(const LogReport& rep) {
  std::ostringstream out;
  auto pad = [](std::string s, size_t w) {
    if (s.size() < w) s += std::string(w - s.size(), ' ');
    else s += ' ';
    return s;
  };
  out << "result log " << rep.source << "  (" << r::kBenchmarkName << ", " << to_string(rep.division)
      << " division)\n\n";
  // REQUIRED BY: both the merged rules and the MLCommons checker, or only one of them.
  out << "  " << pad("RESULT", 8) << pad("REQUIRED BY", 13) << pad("RULE", 36) << "EVIDENCE\n";
  for (const auto& rule : rep.rules)
    out << "  "
        << pad(rule.passed()   ? "pass"
               : rule.stricter ? "WARN"
                               : "FAIL",
               8)
        << pad(rule.stricter ? "mlpt" : std::string(authority_name(rule.authority)), 13) << pad(rule.id, 36)
        << rule.evidence << "\n";
  auto list = [&](const std::vector<Violation>& all) {
    for (const auto& v : all)
      out << "  " << pad(v.line > 0 ? "line " + std::to_string(v.line) : "(log)", 12) << pad(v.rule, 30)
          << v.message << "\n";
  };
  auto violations = rep.violations(), checker = rep.checker_violations(), warnings = rep.warnings();
  if (!violations.empty()) {
    out << "\nviolations of the merged rules (" << violations.size() << "):\n";
    list(violations);
  }
  if (!checker.empty()) {
    out << "\nwhat the MLCommons checker " << r::kCheckerVersion << " fails (" << checker.size() << "):\n";
    list(checker);
  }
  if (!warnings.empty()) {
    out << "\nwarnings (" << warnings.size() << "; mlpt is stricter here than the MLCommons checker, which accepts them):\n";
    list(warnings);
  }
  if (!rep.findings.empty()) {
    out << "\nfindings (informational):\n";
    for (const auto& f : rep.findings)
      out << "  " << pad(f.line > 0 ? "line " + std::to_string(f.line) : "(log)", 12) << f.message << "\n";
  }
  size_t failed = std::count_if(rep.rules.begin(), rep.rules.end(), [](const RuleResult& r) { return !r.passed(); });
  out << "\n"
      << (rep.compliant() ? "COMPLIANT" : "NOT COMPLIANT")
      << " with the merged rules: " << rep.rules.size() - failed << " of " << rep.rules.size()
      << " rules pass, " << violations.size() << " violation(s), " << warnings.size() << " warning(s)\n";
  out << "MLCommons checker " << r::kCheckerVersion
      << " would answer: " << (rep.checker_compliant() ? "SUCCESS" : "FAIL") << " (" << checker.size()
      << " failure(s))\n";
  if (rep.time_to_train_minutes)
    out << "time to train: " << num(*rep.time_to_train_minutes) << " min"
        << (rep.resumed_from_step ? " (a resumed run, including " + num(rep.time_already_spent_minutes.value_or(0)) +
                                        " min of earlier attempts; not a scored result)"
                                  : std::string())
        << "\n";
  else
    out << "time to train: none (needs run_stop status success and an eval_accuracy above the target)\n";
  return out.str();
}

}  // namespace mlpt::check
