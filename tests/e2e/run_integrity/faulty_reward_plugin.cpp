// A test double of a buggy submitter reward: it grades the letters task like the real one (1.0 when
// the answer's first character is accepted) until its grade call number N, then fails as
// MLPT_TEST_REWARD_FAULT says: "segv:N" dereferences a null pointer (a real SIGSEGV inside the
// plugin), "error:N" returns an error. Without the variable it never fails, so the same config
// can be resumed after the crash.
#include <mlpt/sdk.hpp>

#include <atomic>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

std::atomic<long> g_grades{0};

class FaultyReward final : public mlpt::sdk::Reward {
 public:
  explicit FaultyReward(std::string_view) {
    if (const char* fault = std::getenv("MLPT_TEST_REWARD_FAULT")) {
      std::string f = fault;
      auto colon = f.find(':');
      kind_ = f.substr(0, colon);
      at_ = colon == std::string::npos ? 1 : std::atol(f.c_str() + colon + 1);
    }
  }
  void grade(mlpt_grade_args& args) override {
    if (!kind_.empty() && ++g_grades >= at_) {
      if (kind_ == "segv") {
        volatile int* nowhere = nullptr;
        *nowhere = 1;
      }
      throw mlpt::sdk::Error(MLPT_INTERNAL, "faulty reward: failing on purpose at grade " + std::to_string(at_));
    }
    const std::string accept = json::parse(mlpt::sdk::view(args.task_json)).value("accept", std::string());
    const std::string answer = json::parse(mlpt::sdk::view(args.result_json)).value("answer", std::string());
    const bool ok = !answer.empty() && accept.find(answer[0]) != std::string::npos;
    args.out_reward = ok ? 1.0 : 0.0;
    args.out_flags = 0;
    mlpt::sdk::write(args.details, json{{"reason", ok ? "accepted" : "not accepted"}}.dump());
  }

 private:
  std::string kind_;
  long at_ = 0;
};

const mlpt_reward_capabilities kCapabilities = {MLPT_REWARD_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/0, /*binary=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-test-faulty", "0.0.1",
                mlpt::sdk::reward_component<FaultyReward>("faulty", "letters grading that crashes or fails on request", &kCapabilities))
