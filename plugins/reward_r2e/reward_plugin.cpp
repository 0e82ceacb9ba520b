// Plugin mlpt_reward_r2e: component reward "r2e", R2E-Gym hidden-test grading (docs/benchmark.md §4).
// Every grade runs in a fresh sandbox from the task's image: the agent's patch is applied without
// the files untracked at start (and any conftest.py it would add), the hidden tests are written from
// the task record (they are never in an image, so no agent sandbox can read them), run_tests.sh runs
// under the test timeout, and the parsed statuses must match expected_output_json as R2E-Gym compares.
// Two named grading modes (config `grading_mode`, written into every grade's details):
//   hardened (default): the run is supervised (witness_record.hpp): the statuses are the witness's
//     judge's, one process per test, from the supervisor's signed record, and a run flagged
//     TAMPER_SUSPECT (by the patch scan or the witness) scores 0.
//   reference: R2E-Gym's semantics exactly (the closed division): the run is not supervised and
//     flags never change the reward.
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/settings.hpp>

#include <chrono>
#include <random>
#include <set>

#include "grading.hpp"
#include "pytest_summary.hpp"
#include "tamper_scan.hpp"
#include "witness_record.hpp"

namespace {

using mlpt::sdk::Error;
using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

// Per-grading secrets (the supervisor's key, the record's nonce) from the kernel's random source.
std::string random_hex(size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = device() & 0xff;
    out += digits[v >> 4], out += digits[v & 0xf];
  }
  return out;
}

class R2EReward final : public mlpt::sdk::Reward {
 public:
  explicit R2EReward(std::string_view config_json) {
    mlpt::sdk::Settings s(config_json, "reward r2e");
    images_ = s.string_or("images", images_);
    test_timeout_s_ = s.number_or("test_timeout_s", test_timeout_s_, 1e-3);
    workspace_ = s.string_or("workspace", workspace_);
    hardened_ = s.choice_or("grading_mode", "hardened", {"reference", "hardened"}) == "hardened";
    // `witness` (older configs) names the same choice: false is the reference mode's unsupervised run.
    if (s.has("witness")) {
      const bool witness = s.boolean_or("witness", true);
      if (s.has("grading_mode") && witness != hardened_)
        throw Error(MLPT_INVALID_ARGUMENT, "reward r2e: \"witness\" contradicts \"grading_mode\" (the witness runs "
                                           "exactly in the hardened mode); drop \"witness\"");
      hardened_ = witness;
    }
    s.reject_unknown();
    mlpt::sdk::log(MLPT_LOG_INFO, "reward r2e",
                   std::string("grading mode ") + (hardened_ ? "hardened (supervised run; a flagged run scores 0)"
                                                             : "reference (R2E-Gym's semantics exactly)"));
  }

  void grade(mlpt_grade_args& args) override {
    json task = parse(mlpt::sdk::view(args.task_json), "task_json");
    json result = parse(mlpt::sdk::view(args.result_json), "result_json");
    if (!args.binding) throw Error(MLPT_INVALID_ARGUMENT, "reward r2e needs a sandbox binding");
    std::map<std::string, std::string> expected;
    try {
      const json exp = mlpt::r2e::json_field(task, "expected_output_json");  // kept alive across the loop
      for (auto& [k, v] : exp.items()) expected[k] = v.get<std::string>();
    } catch (const std::exception& e) {
      throw Error(MLPT_INVALID_ARGUMENT, std::string("reward r2e: ") + e.what());
    }
    if (expected.empty()) throw Error(MLPT_INVALID_ARGUMENT, "reward r2e: expected_output_json is empty");

    json details = {{"tests", json::object()}, {"grading_mode", hardened_ ? "hardened" : "reference"}};
    args.out_reward = 0.0;
    args.out_flags = args.episode_end == MLPT_EPISODE_TIMEOUT ? MLPT_REWARD_FLAG_AGENT_TIMEOUT : 0u;
    auto done = [&](const std::string& reason) {
      details["reason"] = reason;
      // Test output and patch text are the sandbox's bytes: invalid UTF-8 is replaced, never thrown.
      mlpt::sdk::write(args.details, details.dump(-1, ' ', false, json::error_handler_t::replace));
    };

    const std::string patch = result.contains("patch") && result["patch"].is_string() ? result["patch"].get<std::string>() : "";
    if (patch.find_first_not_of(" \t\r\n") == std::string::npos) return done("empty patch");

    // Patches that reach into the runner, the import machinery or the call stack: graded as any
    // other, and flagged so that every such reward is visible in the report.
    auto findings = mlpt::r2e::scan_patch_for_tampering(patch);
    if (!findings.empty()) {
      args.out_flags |= MLPT_REWARD_FLAG_TAMPER_SUSPECT;
      for (const auto& f : findings)
        details["tamper_suspect"].push_back({{"file", f.file}, {"pattern", f.pattern}, {"line", f.line}});
    }

    auto t0 = std::chrono::steady_clock::now();
    mlpt::sdk::BoundSandbox box(args.binding, image_of(task));
    details["timing"]["create_s"] = seconds_since(t0);

    // Untracked files at start: the harness's list, and the grader's own view of the same image;
    // then what is left of the patch after the exclusions, applied (one exec).
    auto t1 = std::chrono::steady_clock::now();
    std::vector<std::string> from_harness;
    if (result.contains("untracked_at_start") && result["untracked_at_start"].is_array())
      for (const auto& f : result["untracked_at_start"])
        if (f.is_string()) from_harness.push_back(f.get<std::string>());
    box.write_file("/tmp/mlpt_agent.patch", patch, 0644);
    auto prep_run = box.exec(mlpt::r2e::prepare_script(workspace_, "/tmp/mlpt_agent.patch", from_harness,
                                                       /*drop_added_hooks=*/hardened_),
                             120000);
    auto prep = mlpt::r2e::parse_prepare(prep_run.output);
    if (!prep.complete && prep_run.truncated) {  // the patch's own bytes overflowed the limit: the rollout's doing
      details["timing"]["apply_s"] = seconds_since(t1);
      return done("preparing the patch printed more than the output limit");
    }
    if (!prep.complete)
      throw Error(MLPT_INTERNAL, "reward r2e: preparing the grading sandbox failed (exit " +
                                     std::to_string(prep_run.exit_code) + "): " + tail(prep_run.output, 2000));
    std::set<std::string> untracked(from_harness.begin(), from_harness.end());
    untracked.insert(prep.untracked.begin(), prep.untracked.end());
    details["excluded"] = std::vector<std::string>(untracked.begin(), untracked.end());
    details["apply_output"] = tail(prep.apply_output, 4000);
    if (prep.numstat.find_first_not_of(" \t\r\n") == std::string::npos && prep.apply_exit == 0) {
      details["timing"]["apply_s"] = seconds_since(t1);
      return done("empty patch (every change is in an excluded file)");
    }
    if (prep.apply_exit != 0) {
      details["timing"]["apply_s"] = seconds_since(t1);
      return done("patch does not apply");
    }

    // The hidden tests, from the record (the bundled suite) or from the image's own copy (R2E-Gym).
    if (task.contains("hidden_tests") && task["hidden_tests"].is_object()) {
      for (auto& [path, text] : task["hidden_tests"].items()) {
        if (path.empty() || path[0] == '/' || path.find("..") != std::string::npos)
          throw Error(MLPT_INVALID_ARGUMENT, "reward r2e: hidden test path \"" + path + "\" must be relative");
        box.write_file(workspace_ + "/" + path, text.get<std::string>(), path.size() > 3 && path.substr(path.size() - 3) == ".sh" ? 0755 : 0644);
      }
    } else {
      auto copied = box.exec("cp -r /r2e_tests " + workspace_ + "/r2e_tests && cp /run_tests.sh " + workspace_ + "/run_tests.sh", 60000);
      if (copied.exit_code != 0)
        throw Error(MLPT_FAILED_PRECONDITION, "reward r2e: the task has no hidden_tests and the image has no /r2e_tests: " + copied.output);
    }
    details["timing"]["apply_s"] = seconds_since(t1);

    auto t2 = std::chrono::steady_clock::now();
    // pytest loads no plugin by itself: entry points declared by metadata in the repository
    // (dist-info, egg-info) would otherwise run inside the test process.
    std::string command = "if command -v bash >/dev/null; then bash run_tests.sh; else sh run_tests.sh; fi";
    const std::string key = random_hex(32), nonce = random_hex(8), dir = "/tmp/mlpt_grading_" + nonce;
    if (hardened_) {
      box.write_file(dir + "/supervisor.py", mlpt::r2e::kWitnessSupervisorPy, 0555);
      box.write_file(dir + "/witness.py", mlpt::r2e::kWitnessPy, 0444);
      box.write_file(dir + "/key", key, 0400);
      command = mlpt::r2e::supervised_command(dir, dir + "/key", nonce, workspace_, command);
    }
    auto run = box.exec("cd " + workspace_ + " && export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 && " + command,
                        static_cast<int64_t>(test_timeout_s(task) * 1000), {}, 8u << 20);
    details["timing"]["tests_s"] = seconds_since(t2);
    details["test_exit_code"] = run.exit_code;
    details["test_output_tail"] = tail(mlpt::r2e::strip_ansi(run.output), 4000);
    if (run.timed_out) {
      args.out_flags |= MLPT_REWARD_FLAG_TEST_TIMEOUT;
      return done("test run timed out");
    }
    if (run.truncated) {  // the real summary may be what was cut
      args.out_flags |= MLPT_REWARD_FLAG_OUTPUT_UNTRUSTED;
      return done("test output passed the output limit and was cut");
    }
    // Hardened: the statuses are the judge's, from the supervisor's signed record; the run's output
    // (what precedes the record) is kept for the log only. Reference: R2E-Gym's parse of the output.
    std::map<std::string, std::string> got;
    if (hardened_) {
      auto record = mlpt::r2e::split_witness_record(run.output, key, nonce);
      if (!record.ok) {
        args.out_flags |= MLPT_REWARD_FLAG_OUTPUT_UNTRUSTED;
        return done("untrusted test run: " + record.why);
      }
      details["test_output_tail"] = tail(mlpt::r2e::strip_ansi(record.run_output), 4000);
      auto verdict = mlpt::r2e::judged_statuses(record.record, run.exit_code);
      // nondumpable: whether the supervisor kept its memory (the key) from the test process.
      details["witness"] = {{"violations", verdict.violations}, {"suspects", verdict.suspects}, {"agrees", verdict.agrees},
                            {"supervisor_nondumpable", record.record.value("nondumpable", false)}};
      if (!verdict.suspects.empty()) args.out_flags |= MLPT_REWARD_FLAG_TAMPER_SUSPECT;
      if (!verdict.agrees) {
        details["tests"] = verdict.statuses;
        args.out_flags |= MLPT_REWARD_FLAG_OUTPUT_UNTRUSTED;
        return done("the grading witness disagrees: " + verdict.why);
      }
      got = verdict.statuses;
    } else {
      auto summary = mlpt::r2e::trusted_summary(run.output, run.exit_code);
      if (!summary.ok) {
        details["tests"] = mlpt::r2e::parse_pytest_summary(run.output);
        args.out_flags |= MLPT_REWARD_FLAG_OUTPUT_UNTRUSTED;
        return done("untrusted test output: " + summary.why);
      }
      got = summary.tests;
    }
    details["tests"] = got;
    auto cmp = mlpt::r2e::compare(expected, got);
    details["mismatches"] = cmp.mismatches;
    if (!cmp.match) return done(got.empty() ? "no test results (pytest summary missing)" : "test statuses differ from expected");
    // In-process tampering cannot be ruled out from the run: hardened grading pays nothing for it.
    if (hardened_ && (args.out_flags & MLPT_REWARD_FLAG_TAMPER_SUSPECT))
      return done("tests match, but the run is flagged TAMPER_SUSPECT: the hardened grading mode scores it 0");
    args.out_reward = 1.0;
    if (args.episode_end == MLPT_EPISODE_MAX_TURNS || args.episode_end == MLPT_EPISODE_MAX_CONTEXT)
      args.out_flags |= MLPT_REWARD_FLAG_HIT_LIMIT;
    done("tests match");
  }

 private:
  static json parse(std::string_view text, const char* what) {
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      throw Error(MLPT_INVALID_ARGUMENT, std::string("reward r2e: ") + what + " is not valid JSON: " + e.what());
    }
  }
  std::string image_of(const json& task) const {
    if (task.contains("image") && task["image"].is_string()) return task["image"].get<std::string>();
    if (!task.contains("repo_name") || !task["repo_name"].is_string() || !task.contains("commit_hash") ||
        !task["commit_hash"].is_string())
      throw Error(MLPT_INVALID_ARGUMENT, "reward r2e: the task has neither \"image\" nor repo_name and commit_hash");
    if (images_.empty())
      throw Error(MLPT_INVALID_ARGUMENT, "reward r2e: set \"images\" in the config (or give the task an \"image\")");
    return images_ + "/" + task["repo_name"].get<std::string>() + "_final_" + task["commit_hash"].get<std::string>() + ".sif";
  }

  // The host's limit for this rollout (60 s in training and validation under the rules) when the task record
  // carries "mlpt_limits" (reward.h), else the config's.
  double test_timeout_s(const json& task) const {
    if (task.contains("mlpt_limits") && task["mlpt_limits"].is_object()) {
      const json& t = task["mlpt_limits"].value("test_timeout_s", json());
      if (t.is_number() && t.get<double>() > 0) return t.get<double>();
    }
    return test_timeout_s_;
  }

  std::string images_, workspace_ = "/testbed";
  double test_timeout_s_ = 60;
  bool hardened_ = true;  // the grading mode: hardened, else reference
};

const mlpt_reward_capabilities kCapabilities = {MLPT_REWARD_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/1, /*binary=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt_reward_r2e", "0.1.0",
                mlpt::sdk::reward_component<R2EReward>("r2e", "R2E-Gym hidden tests in a fresh sandbox, 1.0 or 0.0",
                                                       &kCapabilities))
