// Harness "letters" and reward "letters" (see README.md): a task graded by the first character of
// the answer, one turn by default; the harness's settings make it multi-turn and slow, for tests of
// the loop (episodes that span a weight update).
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/settings.hpp>

#include <chrono>
#include <thread>

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

void no_settings(std::string_view config, const char* who) { mlpt::sdk::Settings(config, who).reject_unknown(); }

// Harness settings: "turns" (replies per episode, default 1; the answer is the first reply, each
// later turn is asked for with the user message "Again."), "step_delay_ms" (each step takes this
// long, like a slow tool; default 0).
struct LettersSettings {
  int64_t turns = 1, step_delay_ms = 0;
};

LettersSettings read_settings(std::string_view config) {
  json c = config.empty() ? json::object() : parse(config, "config");
  if (!c.is_object()) throw Error(MLPT_INVALID_ARGUMENT, "letters harness: the config must be a JSON object");
  LettersSettings s;
  for (auto& [k, v] : c.items()) {
    if (!v.is_number_integer() || v.get<int64_t>() < (k == "turns" ? 1 : 0) || (k != "turns" && k != "step_delay_ms"))
      throw Error(MLPT_INVALID_ARGUMENT, "letters harness: bad setting "" + k + "" = " + v.dump() +
                                             " (known: turns: integer >= 1, step_delay_ms: integer >= 0)");
    (k == "turns" ? s.turns : s.step_delay_ms) = v.get<int64_t>();
  }
  return s;
}

class LettersEpisode final : public mlpt::sdk::Episode {
 public:
  explicit LettersEpisode(LettersSettings s) : settings_(s) {}
  void step(std::string_view reply_json, const mlpt_sink* out) override {
    json reply = parse(reply_json, "reply");
    if (settings_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settings_.step_delay_ms));
    if (replies_++ == 0) answer_ = reply.value("content", std::string());
    const bool done = replies_ >= settings_.turns;
    json messages = done ? json::array() : json::array({{{"role", "user"}, {"content", "Again."}}});
    mlpt::sdk::write(out, json{{"messages", messages}, {"done", done}, {"finish_reason", done ? "answered" : ""}}.dump());
  }
  void finish(mlpt_episode_end, const mlpt_sink* out) override {
    mlpt::sdk::write(out, json{{"answer", answer_}}.dump());
  }

 private:
  LettersSettings settings_;
  int64_t replies_ = 0;
  std::string answer_;
};

class LettersHarness final : public mlpt::sdk::Harness {
 public:
  explicit LettersHarness(std::string_view config) : settings_(read_settings(config)) {}
  std::unique_ptr<mlpt::sdk::Episode> start(const mlpt_episode_start_args& args) override {
    json task = parse(mlpt::sdk::view(args.task_json), "task record");
    json start = {{"messages", json::array({{{"role", "user"}, {"content", field(task, "prompt", "task record")}}})},
                  {"tools", json::array()}};
    mlpt::sdk::write(args.out, start.dump());
    return std::make_unique<LettersEpisode>(settings_);
  }

 private:
  LettersSettings settings_;
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
