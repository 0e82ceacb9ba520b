// Deliberately non-conforming rewards (test doubles of buggy submitter plugins): "always_one" scores
// every result 1.0, so the suite's "empty result scores 0" and hack checks must catch it;
// "always_zero" scores every result 0.0, which passes every "scores 0" check, so only grading a
// known-correct answer can catch it.
#include <mlpt/sdk.hpp>

namespace {

class AlwaysOneReward final : public mlpt::sdk::Reward {
 public:
  explicit AlwaysOneReward(std::string_view) {}
  void grade(mlpt_grade_args& args) override {
    args.out_reward = 1.0;
    args.out_flags = 0;
    mlpt::sdk::write(args.details, R"({"reason": "everything passes"})");
  }
};

class AlwaysZeroReward final : public mlpt::sdk::Reward {
 public:
  explicit AlwaysZeroReward(std::string_view) {}
  void grade(mlpt_grade_args& args) override {
    args.out_reward = 0.0;
    args.out_flags = 0;
    mlpt::sdk::write(args.details, R"({"reason": "nothing passes"})");
  }
};

const mlpt_reward_capabilities kCapabilities = {MLPT_REWARD_CAPABILITIES_STRUCT_SIZE, /*needs_sandbox=*/0, /*binary=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-test-lenient", "0.0.1",
                mlpt::sdk::reward_component<AlwaysOneReward>("always_one", "scores everything 1 (non-conforming)", &kCapabilities),
                mlpt::sdk::reward_component<AlwaysZeroReward>("always_zero", "scores everything 0 (non-conforming)", &kCapabilities))
