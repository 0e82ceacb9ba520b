// The conformance checks of each component kind, one file per kind as in core/plugin/kinds/ and
// abi/include/mlpt/: each records its checks in the suite in the order check_plugins runs them.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/check/conformance/suite.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::check::conformance {

// The engine as its checks leave it, for the trainer's checks that compare against it: the prompt
// it was asked and the tokens and logprobs it gave (its first generation).
struct EngineUnderCheck {
  std::unique_ptr<components::Engine> engine;  // null when it could not be created
  mlpt_engine_model_info info{};
  std::vector<int32_t> prompt;
  components::Generation first;
};

// What the harness and reward checks run episodes with: the first training task, its image, the
// sandbox runtime and (once created) the harness.
struct EpisodeEnv {
  const plugin::ComponentSet& set;
  nlohmann::json task;
  std::string task_json, image;
  std::unique_ptr<components::SandboxRuntime> runtime;  // when the combination has a sandbox
  std::unique_ptr<components::Harness> harness;         // set by check_harness

  const mlpt_sandbox_binding* binding() const { return runtime ? runtime->binding() : nullptr; }
  bool can_run_episodes() const {
    return harness && (!harness->capabilities().needs_sandbox || (runtime && !image.empty()));
  }

  // An episode of the task in a fresh sandbox; the episode goes before its sandbox.
  struct Open {
    std::unique_ptr<components::SandboxRuntime::Sandbox> box;
    std::unique_ptr<components::Harness::Episode> episode;
  };
  Open open() const {
    Open o;
    if (harness->capabilities().needs_sandbox) o.box = runtime->create(image);
    o.episode = harness->start(task_json, binding(), o.box ? o.box->handle() : nullptr);
    return o;
  }
};

// engine.h: fills `checked`; its engine stays null when create failed.
void check_engine(Suite& s, const plugin::ComponentSet& set, EngineUnderCheck& checked);
// trainer.h, against the engine's generation; then the weights trainer to engine through the transport.
void check_trainer(Suite& s, const plugin::ComponentSet& set, const run::RunConfig& c,
                   EngineUnderCheck& checked);
// transport.h, in one process.
void check_transport(Suite& s, const plugin::ComponentSet& set);
// With [run] refit = "sparse": the sparse transport wrapping the config's, in one process.
void check_sparse_refit(Suite& s, const plugin::ComponentSet& set, const run::RunConfig& c);
// sandbox.h: returns the runtime for the harness and reward checks (null when it could not be created).
// `stop` is the host services' cancellation flag (set here to check that exec honours it).
std::unique_ptr<components::SandboxRuntime> check_sandbox(Suite& s, const plugin::ComponentSet& set,
                                                          const std::string& image, std::atomic<bool>& stop);
// The task's image holds only the base commit's history (docs/benchmark.md §4): the fix commit is not an
// object of the repository at all (no ref, reflog entry, pack or loose object names it), and no
// commit exists that HEAD does not reach.
void check_task_image(Suite& s, const EpisodeEnv& env);
// harness.h: sets env.harness when create succeeds.
void check_harness(Suite& s, EpisodeEnv& env);
// reward.h: empty, correct and hacked answers graded; `golden_file` holds the known-correct answers.
void check_reward(Suite& s, EpisodeEnv& env, const std::filesystem::path& golden_file);

}  // namespace mlpt::check::conformance
