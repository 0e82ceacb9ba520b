// `mlpt run CONFIG.toml [--new-folder]` / `mlpt run --resume DIR|CONFIG.toml`: the benchmark loop.
// Ctrl-C / SIGTERM stop it cleanly (core/cli/interrupt.hpp): plugin calls are cancelled, sandboxes
// destroyed, and the result log is closed with status aborted. A run never writes into a folder that holds another run.
//
// Exit status: 0 converged (the target was reached), 1 did not converge within max_steps, 2 usage
// or config error (nothing was run), 3 the run failed (an error stopped it; the message says which),
// 130 interrupted, 128+N the process died on signal N (a crash; the log is closed, see stderr).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/cli/interrupt.hpp"
#include "core/dist/launcher.hpp"
#ifdef MLPT_HAVE_MPI
#include "core/dist/mpi/distributed_run.hpp"
#endif
#include "core/run/benchmark_run.hpp"
#include "core/run/run_dir.hpp"

namespace mlpt::cli {
namespace {

constexpr int kConverged = 0, kNotConverged = 1, kFailed = 3, kInterrupted = 130;

// The run's time by phase (the report's split): seconds summed over the threads that spent them, so
// phases that overlap may add up to more than the wall time; each as its share of that sum.
void print_time_split(const std::vector<std::pair<std::string, double>>& split) {
  double total = 0;
  for (const auto& [phase, seconds] : split) total += seconds;
  if (total <= 0) return;
  std::cout << "  time split (seconds summed over threads; phases overlap):\n";
  for (const auto& [phase, seconds] : split) {
    char line[128];
    std::snprintf(line, sizeof(line), "    %-16s %10.1f s  %5.1f%%\n", phase.c_str(), seconds, 100.0 * seconds / total);
    std::cout << line;
  }
}


int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--resume", "--new-folder"}, {});
  const bool resume = args.flag("--resume");
  if (resume && args.flag("--new-folder")) throw Error("--new-folder starts a new run; it cannot go with --resume");
  // --resume takes the run's output folder (its run.json names the config) or the run's config.
  std::filesystem::path target = args.positional(0, resume ? "DIR or CONFIG.toml" : "CONFIG.toml");
  std::filesystem::path resume_dir;
  if (resume && std::filesystem::is_directory(target)) resume_dir = target, target = run::config_of_run(target);
  auto config = run::read_run_config(target);
  // Several processes started by a launcher run one benchmark together (core/dist/).
  const auto launched = dist::launched_process();
  if (launched.world_size > 1 && !dist::built_with_mpi())
    throw Error(MLPT_UNIMPLEMENTED, "mlpt run: started as " + std::to_string(launched.world_size) + " processes by " + launched.launcher +
                                        ", but this mlpt was built without MPI (install libopenmpi-dev and rebuild), so it runs in one "
                                        "process only");
  // The folder is the run: it may differ from the config's output_dir (--new-folder, or ${VARS}
  // that expand differently now).
  if (!resume_dir.empty()) config.run.output_dir = resume_dir;
  // A resumed run keeps the keys that define its results; those that place the work may change.
  const std::vector<run::ConfigChange> placement_changes = resume ? run::check_resumed_config(config.run.output_dir, target)
                                                                  : std::vector<run::ConfigChange>{};
  if (args.flag("--new-folder")) config.run.output_dir = run::free_output_dir(config.run.output_dir);
  const auto& interrupted = install_interrupt_handlers();

  run::RunOptions options;
  options.resume = resume;
  options.interrupted = &interrupted;
  if (launched.rank == 0)
    std::cerr << "mlpt run: " << config.run.name << " -> " << config.run.output_dir.string()
              << (launched.world_size > 1 ? " (" + std::to_string(launched.world_size) + " processes by " + launched.launcher + ")" : "")
              << "\n";
  if (launched.rank == 0 && !placement_changes.empty()) {
    std::cerr << "mlpt run: note: the run resumes with its work placed otherwise than it started (every key that defines\n"
                 "  its results is unchanged):\n";
    for (const auto& c : placement_changes) std::cerr << "  " << c.key << ": " << c.before << " -> " << c.after << "\n";
  }
  if (launched.rank == 0 && launched.launcher == "mpirun" && !launched.mpirun_recovery)
    std::cerr << "mlpt run: note: mpirun ends the whole job when any rank dies; with mpirun --enable-recovery\n"
                 "  the run goes on without a rollout worker that dies (docs/distributed.md)\n";
  run::RunSummary s;
#ifdef MLPT_HAVE_MPI
  dist::DistributedOutcome outcome;  // holds MPI until the run is reported
  if (launched.world_size > 1) {
    outcome = dist::run_distributed(config, options);
    if (!outcome.coordinator) {  // the coordinator reports the run
      // Under --enable-recovery nothing ends this rank when another is lost (not even the
      // coordinator's MPI_Abort): it leaves. Otherwise that abort ends it, after the coordinator's
      // status has become the job's.
      if (outcome.rank_lost && launched.mpirun_recovery) outcome.mpi->leave_job(outcome.exit_code);
      return outcome.exit_code;
    }
    s = std::move(outcome.summary);
  } else
#endif
    s = run::run_benchmark(config, options);
  std::cout << "\n" << (s.converged ? "converged" : "not converged") << " after " << s.steps << " steps, "
            << s.samples << " samples, " << s.time_to_train_minutes << " min"
            << (s.abort_reason.empty() ? "" : " (" + s.abort_reason + ")") << "\n";
  if (s.resumed_from_step >= 0)
    std::cout << "  resumed from the step-" << s.resumed_from_step << " checkpoint; the time includes "
              << s.time_already_spent_minutes << " min of earlier attempts (a resumed run is not a scored result)\n";
  std::cout << "  reward: first step " << s.first_step_reward << ", last step " << s.last_step_reward
            << "; best pass@k " << s.best_pass_at_k << "\n"
            << "  rollouts:   " << s.rollouts << " (" << s.failed_rollouts
            << " failed, back-filled with reward 0)\n";
  for (const auto& why : s.lost_workers) std::cout << "  lost:       " << why << "\n";
  print_time_split(s.time_split);
  std::cout << "  result log: " << s.result_log.string() << "\n"
            << "  metrics:    " << s.metrics.string() << "\n"
            << "  report:     " << s.report.string() << "\n";
  const int status = interrupted.load() ? kInterrupted
                     : s.converged        ? kConverged
                     : s.abort_reason == run::kNotConvergedReason ? kNotConverged : kFailed;
  if (launched.mpirun_recovery)  // the only place the run's status shows under it
    std::cout << "  exit status " << status
              << " (mpirun --enable-recovery itself exits 0 whatever the ranks return)\n"
              << std::flush;
#ifdef MLPT_HAVE_MPI
  // A rank that is hung or gone would never finish MPI with the others: end the job instead.
  if (outcome.end_job) outcome.mpi->abort_job(status);
  if (outcome.rank_lost && launched.mpirun_recovery) outcome.mpi->leave_job(status);
#endif
  return status;
}

}  // namespace

MLPT_COMMAND("run", "CONFIG.toml [--new-folder] | --resume DIR|CONFIG.toml",
             "run the benchmark loop (async GRPO); exit 0 converged, 1 not converged, 3 failed", &run,
             "A run writes its result log, metrics, rollouts, report and checkpoints to [run] output_dir and never\n"
             "into a folder that holds another run: --new-folder takes the next free <output_dir>-N instead.\n"
             "--resume continues the run in DIR (or the one CONFIG.toml wrote) from its last checkpoint. Only keys\n"
             "that place the work may change (the trainer's and engine's tensor_parallel/expert_parallel,\n"
             "[placement], threads, devices; it prints what changed); a changed key that defines the results\n"
             "(model, data, benchmark, optimizer, seeds) is refused, naming it. A resumed run is marked in its\n"
             "log and is not a scored result.\n\n"
             "exit status: 0 converged, 1 not converged within max_steps, 2 usage or config error (nothing ran),\n"
             "3 failed (the message says why), 130 interrupted, 128+N died on signal N (a crash; see stderr).");

}  // namespace mlpt::cli
