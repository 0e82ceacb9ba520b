// Harness "letters" and reward "letters" (see README.md): a one-turn task graded by the first
// character of the answer.
#include <mlpt/sdk.hpp>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using mlpt::sdk::Error;

json parse(std::string_view text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " is not JSON: " + e.what());
  }
}

std::string field(const json& j, const char* key, const char* what) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " has no string field \"" + key + "\"");
  return j[key].get<std::string>();
}

void no_settings(std::string_view config, const char* who) {
  json c = config.empty() ? json::object() : parse(config, "config");
  if (!c.is_object() || !c.empty())
    throw Error(MLPT_INVALID_ARGUMENT, std::string(who) + " takes no settings, got " + std::string(config));
}

class LettersEpisode final : public mlpt::sdk::Episode {
 public:
  void step(std::string_view reply_json, const mlpt_sink* out) override {
    json reply = parse(reply_json, "reply");
    answer_ = reply.value("content", std::string());
    mlpt::sdk::write(out, json{{"messages", json::array()}, {"done", true}, {"finish_reason", "answered"}}.dump());
  }
  void finish(mlpt_episode_end, const mlpt_sink* out) override {
    mlpt::sdk::write(out, json{{"answer", answer_}}.dump());
  }

 private:
  std::string answer_;
};

class LettersHarness final : public mlpt::sdk::Harness {
 public:
  explicit LettersHarness(std::string_view config) { no_settings(config, "letters harness"); }
  std::unique_ptr<mlpt::sdk::Episode> start(const mlpt_episode_start_args& args) override {
    json task = parse(mlpt::sdk::view(args.task_json), "task record");
    json start = {{"messages", json::array({{{"role", "user"}, {"content", field(task, "prompt", "task record")}}})},
                  {"tools", json::array()}};
    mlpt::sdk::write(args.out, start.dump());
    return std::make_unique<LettersEpisode>();
  }
};

class LettersReward final : public mlpt::sdk::Reward {
 public:
  explicit LettersReward(std::string_view config) { no_settings(config, "letters reward"); }
  void grade(mlpt_grade_args& args) override {
    std::string accept = field(parse(mlpt::sdk::view(args.task_json), "task record"), "accept", "task record");
    json result = parse(mlpt::sdk::view(args.result_json), "result");
    std::string answer = result.value("answer", std::string());
    bool ok = !answer.empty() && accept.find(answer[0]) != std::string::npos;
    args.out_reward = ok ? 1.0 : 0.0;
    args.out_flags = 0;
    mlpt::sdk::write(args.details, json{{"reason", ok ? "accepted" : answer.empty() ? "empty answer" : "first character not accepted"}}.dump());
  }
};

const mlpt_harness_capabilities kHarnessCaps = {MLPT_HARNESS_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/0, /*produces_patch=*/0};
const mlpt_reward_capabilities kRewardCaps = {MLPT_REWARD_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/0, /*binary=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-task-letters", "0.1.0",
                mlpt::sdk::harness_component<LettersHarness>("letters", "one-turn prompt, answer graded by its first character", &kHarnessCaps),
                mlpt::sdk::reward_component<LettersReward>("letters", "1.0 when the answer starts with an accepted character", &kRewardCaps))
