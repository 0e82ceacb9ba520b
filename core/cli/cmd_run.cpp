// `mlpt run CONFIG.toml` / `mlpt run --resume DIR`: the benchmark loop. Ctrl-C / SIGTERM stop it cleanly: rollouts
// are cancelled, sandboxes destroyed, and the result log is closed with status aborted.
#include <csignal>
#include <filesystem>
#include <iostream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/run/benchmark_run.hpp"
#include "core/run/run_dir.hpp"

namespace mlpt::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_signal(int) { g_interrupted.store(true); }

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--resume"}, {});
  // --resume takes the run's output folder (its run.json names the config) or, as before, the config.
  std::filesystem::path target = args.positional(0, args.flag("--resume") ? "DIR" : "CONFIG.toml");
  std::filesystem::path resume_dir;
  if (args.flag("--resume") && std::filesystem::is_directory(target)) resume_dir = target, target = run::config_of_run(target);
  auto config = run::read_run_config(target);
  std::error_code ec;
  if (!resume_dir.empty() && !std::filesystem::equivalent(resume_dir, config.run.output_dir, ec))
    throw Error(MLPT_FAILED_PRECONDITION, target.string() + " now writes to " + config.run.output_dir.string() + ", not " +
                                              resume_dir.string() + " (check the environment its ${VARS} expand from)");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  run::RunOptions options;
  options.resume = args.flag("--resume");
  options.interrupted = &g_interrupted;
  std::cerr << "mlpt run: " << config.run.name << " -> " << config.run.output_dir.string() << "\n";
  auto s = run::run_benchmark(config, options);
  std::cout << "\n" << (s.converged ? "converged" : "not converged") << " after " << s.steps << " steps, "
            << s.samples << " samples, " << s.time_to_train_minutes << " min"
            << (s.abort_reason.empty() ? "" : " (" + s.abort_reason + ")") << "\n"
            << "  reward: first step " << s.first_step_reward << ", last step " << s.last_step_reward
            << "; best pass@k " << s.best_pass_at_k << "\n"
            << "  result log: " << s.result_log.string() << "\n"
            << "  metrics:    " << s.metrics.string() << "\n"
            << "  report:     " << s.report.string() << "\n";
  if (g_interrupted.load()) return 130;
  return s.abort_reason.empty() || s.abort_reason == "did not reach the target within max_steps" ? 0 : 1;
}

}  // namespace

MLPT_COMMAND("run", "CONFIG.toml | --resume DIR", "run the benchmark loop (async GRPO) with a run config", &run);

}  // namespace mlpt::cli
