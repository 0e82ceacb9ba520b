// One rollout, end to end: a sandbox from the task's image (when the harness needs one), the
// harness's first messages rendered by the chat format, then turns of engine generation -> parsed
// reply -> harness step -> observation tokens appended, until the agent finishes or a limit ends
// it; then the harness's result, the reward (in a fresh sandbox, the reward's business), and the
// exact token sequence with its loss mask (only generated tokens train).
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "core/components/instances.hpp"
#include "core/rollout/trajectory.hpp"
#include "core/text/chat_format.hpp"
#include "core/text/tokenizer.hpp"

namespace mlpt::rollout {

struct EpisodeLimits {
  int64_t max_turns = 30;
  int64_t max_sequence_length = 65536;
  int64_t max_new_tokens_per_turn = 8192;
  double agent_timeout_s = 1800;
};

// What every episode of a run shares. All members must outlive the episodes.
struct EpisodeEnvironment {
  components::Engine* engine;
  components::Harness* harness;
  components::Reward* reward;
  const components::SandboxRuntime* sandboxes;  // NULL when no component needs one
  const text::Tokenizer* tokenizer;
  const text::ChatFormat* chat;
  std::vector<int32_t> stop_tokens;             // e.g. <|im_end|>
  bool record_routed_experts = false;
  const std::atomic<bool>* cancelled = nullptr;  // stop promptly when set
};

struct EpisodeRequest {
  const nlohmann::json* task = nullptr;  // the dataset row
  std::string image;                     // sandbox image path; empty when none
  int64_t prompt_index = 0;
  int32_t sample_index = 0;
  mlpt_sampling_params sampling{};
  uint64_t id = 0;                       // unique per rollout in the run (request and session id)
  EpisodeLimits limits;
};

// Runs one episode. Failures of the agent are outcomes (reward 0 with a reason); an mlpt::Error is
// thrown only when the infrastructure fails (engine error, sandbox cannot be created, cancelled).
Trajectory run_episode(const EpisodeEnvironment& env, const EpisodeRequest& request);

}  // namespace mlpt::rollout
