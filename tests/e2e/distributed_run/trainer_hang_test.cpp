// A trainer rank that hangs (SIGSTOP, as a wedged GPU or a stuck collective would) or dies (kill -9)
// stops the run within its timeout with a message naming the rank: a hung one after [placement]
// answer_timeout_s, a dead one after heartbeat_timeout_s (launched with mpirun --enable-recovery,
// as docs/distributed.md says, so that mlpt and not mpirun reports it). The last checkpoint is
// whole, and `mpirun ... mlpt run --resume DIR` continues from it to the end. A refit broken by
// either end's death names that end, not the ranks on the other end whose transfer broke.
#include <catch2/catch.hpp>

#include <csignal>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

namespace {

constexpr int kSteps = 30;

struct Outcome {
  std::string output;
  int status = 0;
  double seconds = 0;
  fs::path out;
};

// Runs up to kSteps steps with a checkpoint after each, sends `signal` to trainer rank 0 (rank 1)
// once the step-2 checkpoint is in place, then resumes the run; returns the first run's outcome.
// kSteps leaves the signal many steps to land in (a tiny step takes well under a second).
// `placement`: lines added to [placement].
Outcome signal_trainer_then_resume(const std::string& tag, int signal, bool recovery,
                                   const std::string& placement, const fs::path& dir) {
  require_tiny_model();
  Outcome o;
  o.out = dir / "run";
  const fs::path config = dir / (tag + ".toml");
  write_tiny_config(config, o.out,
                    {{"checkpoint_every_steps = ", "checkpoint_every_steps = 1"},
                     {"max_steps = ", "max_steps = " + std::to_string(kSteps)},
                     {"first_eval_samples = ", "first_eval_samples = 64000"},
                     {"trainer_ranks = 1", "trainer_ranks = 1\n" + placement}});
  const std::string line = launch(tag, 600, recovery);
  const fs::path step_2 = o.out / "checkpoints" / "step_2" / "loop_state.json";  // renamed into place whole
  const SignalledRun run = run_signalling_rank(line + config.string() + " 2>&1", tag, 1, signal, [&] { return fs::exists(step_2); });
  o.output = run.output, o.status = run.status, o.seconds = run.seconds;
  const int signalled = run.signalled;
  INFO(o.output);
  REQUIRE(signalled > 0);
  if (signal == SIGSTOP) ::kill(signalled, SIGKILL);  // should mpirun have left it behind

  // The last checkpoint is whole: its loop state and the trainer's state.
  const int last = last_checkpoint(o.out);
  REQUIRE(last >= 2);
  const fs::path checkpoint = o.out / "checkpoints" / ("step_" + std::to_string(last));
  CHECK(fs::exists(checkpoint / "loop_state.json"));
  CHECK(!fs::is_empty(checkpoint / "trainer"));

  int status = 0;
  const std::string second = mlpt_test::run_command(line + "--resume " + o.out.string() + " 2>&1", &status);
  INFO(second);
  CHECK((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  CHECK_THAT(second, Catch::Contains("resumed from the step-" + std::to_string(last) + " checkpoint"));
  CHECK(lines(o.out / "metrics.jsonl") == kSteps);
  return o;
}

}  // namespace

TEST_CASE("a hung trainer rank stops the run naming it and --resume continues from the last whole checkpoint") {
  mlpt_test::TempDir dir("trainer_hang");
  Outcome o = signal_trainer_then_resume("trainer-hang", SIGSTOP, false, "answer_timeout_s = 10", dir.str());
  INFO(o.output);
  CHECK(WEXITSTATUS(o.status) == 3);
  // Stopped while it computes ("did not answer 'train'") or before it took the command ("did not
  // take 'train'"): which depends on when the signal lands; either names the rank and the setting.
  CHECK_THAT(o.output, Catch::Contains("trainer rank 0 (rank 1) did not") &&
                           Catch::Contains("([placement] answer_timeout_s): it is hung or gone"));
  CHECK(o.seconds < 300);
}

TEST_CASE("a trainer rank killed with kill -9 stops the run naming it and --resume continues from the last whole checkpoint") {
  mlpt_test::TempDir dir("trainer_kill");
  Outcome o =
      signal_trainer_then_resume("trainer-kill", SIGKILL, true, "heartbeat_timeout_s = 10", dir.str());
  INFO(o.output);
  // mpirun --enable-recovery exits 0 whatever the ranks return: the coordinator prints the status.
  CHECK_THAT(o.output, Catch::Contains("trainer rank 0 (rank 1): no heartbeat for 10 s") &&
                           Catch::Contains("heartbeat_timeout_s"));
  CHECK_THAT(o.output, Catch::Contains("exit status 3"));
  CHECK(o.seconds < 300);
}

namespace {

// A run whose refit breaks in version 3 (bucket_bytes 64 KiB: some 140 buckets a version here): the
// test-only UCX `fault` ends the sender's or the receivers' processes part way through it. Returns
// the output; the run's folder is `out`. Every receiver is streamed over its peer-checked connection
// (shared_memory false): over the shared-memory stream, UCX 1.13 may abort a receiver whose sender
// died mid-stream (plugins/transport_ucx/README.md), and then both ends fall silent at once.
std::string run_with_refit_fault(const std::string& tag, const std::string& fault, const fs::path& dir,
                                 fs::path& out) {
  require_tiny_model();
  out = dir / "run";
  const fs::path config = dir / (tag + ".toml");
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ", "checkpoint_every_steps = 1"},
                     {"max_steps = ", "max_steps = " + std::to_string(kSteps)},
                     {"first_eval_samples = ", "first_eval_samples = 64000"},
                     {"trainer_ranks = 1", "trainer_ranks = 1\nheartbeat_timeout_s = 10"},
                     {"receivers = 2",
                      "receivers = 2\nbucket_bytes = 65536\nshared_memory = false\n" + fault}});
  int status = 0;
  return mlpt_test::run_command(launch(tag, 600, true) + config.string() + " 2>&1", &status);
}

}  // namespace

// A refit's failure shows on both ends; the run names the end that caused it (the one whose
// heartbeat stopped), not the ranks whose transfer it broke.
TEST_CASE("a trainer rank lost mid-refit is named, not the rollout workers whose fetch it broke") {
  mlpt_test::TempDir dir("trainer_lost_mid_refit");
  fs::path out;
  // The sender's process ends after 700 bucket sends (both receivers): version 3, part way through.
  const std::string fault = "test_only_sender_exit_after_buckets = 700";
  const std::string output = run_with_refit_fault("trainer-lost-mid-refit", fault, dir.str(), out);
  INFO(output);
  REQUIRE_THAT(output, Catch::Contains("test_only_sender_exit_after_buckets reached"));
  CHECK_THAT(output, Catch::Contains("fetch_weights"));  // the workers' fetches did break
  CHECK_THAT(output, Catch::Contains("(trainer rank 0 (rank 1): no heartbeat for 10 s"));
  CHECK_THAT(output, !Catch::Contains("every rollout worker is lost"));
  CHECK_THAT(output, Catch::Contains("exit status 3"));
  CHECK(last_checkpoint(out) >= 1);
}

TEST_CASE("rollout workers lost mid-refit are named, not the trainer rank whose send they broke") {
  mlpt_test::TempDir dir("workers_lost_mid_refit");
  fs::path out;
  // Each receiver's process ends after 350 buckets landed: version 3, part way through.
  const std::string output =
      run_with_refit_fault("workers-lost-mid-refit", "test_only_exit_after_buckets = 350", dir.str(), out);
  INFO(output);
  REQUIRE_THAT(output, Catch::Contains("test_only_exit_after_buckets reached"));
  CHECK_THAT(output, Catch::Contains("trainer rank 0 (rank 1): ") && Catch::Contains("publish_weights"));
  CHECK_THAT(output, Catch::Contains("(every rollout worker is lost; the last: rollout worker"));
  CHECK_THAT(output, Catch::Contains("no heartbeat for 10 s"));
  CHECK_THAT(output, Catch::Contains("exit status 3"));
  CHECK(last_checkpoint(out) >= 1);
}
