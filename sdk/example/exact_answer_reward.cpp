// Example plugin: a reward component in ~50 lines of C++ with the SDK. It grades a rollout 1.0 when
// the harness's final answer equals the task's "answer" field (after trimming whitespace), else 0.0.
// Build it out of tree with find_package(mlpt) + mlpt_add_plugin(); see sdk/README.md.
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/settings.hpp>

#include <string>

namespace {

// Minimal field lookup for the flat JSON objects this example reads ({"answer": "..."}); a real
// plugin would use a JSON library. Returns the string value of `key`, or nothing.
bool json_string_field(std::string_view json, std::string_view key, std::string& out) {
  std::string needle = "\"" + std::string(key) + "\"";
  size_t at = json.find(needle);
  if (at == std::string_view::npos) return false;
  at = json.find(':', at + needle.size());
  if (at == std::string_view::npos) return false;
  at = json.find('"', at);
  if (at == std::string_view::npos) return false;
  out.clear();
  for (size_t i = at + 1; i < json.size(); ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) {
      char c = json[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;  // \uXXXX is left as is
    } else if (json[i] == '"') {
      return true;
    } else {
      out += json[i];
    }
  }
  return false;
}

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

class ExactAnswerReward final : public mlpt::sdk::Reward {
 public:
  explicit ExactAnswerReward(std::string_view config_json) {
    mlpt::sdk::Settings(config_json, "reward exact_answer").reject_unknown();  // it takes none: any key is a mistake
  }

  void grade(mlpt_grade_args& args) override {
    std::string expected, answer;
    if (!json_string_field(mlpt::sdk::view(args.task_json), "answer", expected))
      throw mlpt::sdk::Error(MLPT_INVALID_ARGUMENT, "task record has no string field \"answer\"");
    json_string_field(mlpt::sdk::view(args.result_json), "answer", answer);
    bool match = trim(answer) == trim(expected);
    args.out_reward = match ? 1.0 : 0.0;
    args.out_flags = 0;
    mlpt::sdk::write(args.details, match ? R"({"reason": "match"})" : R"({"reason": "mismatch"})");
  }
};

const mlpt_reward_capabilities kCapabilities = {MLPT_REWARD_CAPABILITIES_STRUCT_SIZE,
                                                /*needs_sandbox=*/0, /*binary=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-example", "0.1.0",
                mlpt::sdk::reward_component<ExactAnswerReward>(
                    "exact_answer", "1.0 when the final answer equals the task's answer", &kCapabilities))
