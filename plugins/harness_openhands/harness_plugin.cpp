// Plugin mlpt_harness_openhands: component harness "openhands", the OpenHands CodeAct agent side
// of a rollout (docs/benchmark.md §5) over the rollout's sandbox.
#include <mlpt/sdk.hpp>

#include "episode.hpp"
#include "sandbox_workspace.hpp"

namespace {

using mlpt::sdk::Error;

nlohmann::json parse(std::string_view text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " is not valid JSON: " + e.what());
  }
}

class OpenHandsEpisode final : public mlpt::sdk::Episode {
 public:
  OpenHandsEpisode(const mlpt_sandbox_binding* binding, mlpt_sandbox* sandbox, const mlpt::openhands::HarnessConfig& c)
      : sandbox_(binding, sandbox), workspace_(sandbox_), episode_(workspace_, c) {}
  nlohmann::ordered_json start(const nlohmann::json& task) { return episode_.start(task); }
  void step(std::string_view reply_json, const mlpt_sink* out) override {
    mlpt::sdk::write(out, episode_.step(parse(reply_json, "reply_json")).dump());
  }
  void finish(mlpt_episode_end end, const mlpt_sink* out) override {
    mlpt::sdk::write(out, episode_.finish(mlpt_episode_end_name(end)).dump());
  }

 private:
  mlpt::sdk::BoundSandbox sandbox_;
  mlpt::openhands::SandboxWorkspace workspace_;
  mlpt::openhands::CodeActEpisode episode_;
};

class OpenHandsHarness final : public mlpt::sdk::Harness {
 public:
  explicit OpenHandsHarness(std::string_view config_json) {
    try {
      config_ = mlpt::openhands::HarnessConfig::from_json(std::string(config_json));
    } catch (const std::exception& e) {
      throw Error(MLPT_INVALID_ARGUMENT, e.what());
    }
  }
  std::unique_ptr<mlpt::sdk::Episode> start(const mlpt_episode_start_args& args) override {
    if (!args.binding || !args.sandbox)
      throw Error(MLPT_INVALID_ARGUMENT, "harness openhands needs the rollout's sandbox and its binding");
    auto task = parse(mlpt::sdk::view(args.task_json), "task_json");
    auto episode = std::make_unique<OpenHandsEpisode>(args.binding, args.sandbox, config_);
    try {
      mlpt::sdk::write(args.out, episode->start(task).dump());
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(MLPT_FAILED_PRECONDITION, std::string("episode start: ") + e.what());
    }
    return episode;
  }

 private:
  mlpt::openhands::HarnessConfig config_;
};

const mlpt_harness_capabilities kCapabilities = {MLPT_HARNESS_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/1,
                                                 /*produces_patch=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt_harness_openhands", "0.1.0",
                mlpt::sdk::harness_component<OpenHandsHarness>(
                    "openhands", "OpenHands CodeAct tools (execute_bash, think, finish, task_tracker, str_replace_editor)",
                    &kCapabilities))
