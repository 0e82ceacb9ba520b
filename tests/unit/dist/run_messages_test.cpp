// What crosses between ranks: a trajectory, an episode request and a batch share survive the trip
// through CBOR bit for bit; a damaged message is refused naming the field.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/dist/run_messages.hpp"
#include "core/error.hpp"

using nlohmann::json;

namespace {

json over_the_wire(const json& j) { return json::from_cbor(json::to_cbor(j)); }

}  // namespace

TEST_CASE("a trajectory crosses as CBOR unchanged, floats bit for bit") {
  mlpt::rollout::Trajectory t;
  t.prompt_index = 41, t.sample_index = 7;
  t.tokens = {5, 9, 1023, 0};
  t.loss_mask = {0, 1, 1, 0};
  t.generation_logprobs = {0.0f, -1.2345678e-7f, -3.5f, 0.0f};
  t.routed_experts = {1, 2, 3, 4, -1, 0, 7, 8};
  t.reward = 0.75, t.reward_flags = 3, t.reward_reason = "tests passed";
  t.end = MLPT_EPISODE_MAX_TURNS;
  t.truncated = true, t.turns = 2, t.min_weight_version = 4, t.max_weight_version = 5;
  t.generation_s = 1.5, t.environment_s = 0.25, t.reward_s = 0.125, t.core_s = 0.0625, t.wall_s = 2.5;
  t.transcript.start_messages = json::array({{{"role", "user"}, {"content", "fix it"}}});
  t.transcript.turns.push_back({{{"content", "ok"}}, {{"done", true}}, 12, 3, 4, 0.5, 0.25, 0.375});
  t.transcript.result = {{"patch", "diff"}};
  t.transcript.reward_details = {{"tests", 3}};
  auto back = mlpt::dist::trajectory_from(over_the_wire(mlpt::dist::trajectory_json(t)));
  CHECK(back.prompt_index == 41);
  CHECK(back.sample_index == 7);
  CHECK(back.tokens == t.tokens);
  CHECK(back.loss_mask == t.loss_mask);
  CHECK(std::memcmp(back.generation_logprobs.data(), t.generation_logprobs.data(), 4 * sizeof(float)) == 0);
  CHECK(back.routed_experts == t.routed_experts);
  CHECK(back.reward == 0.75);
  CHECK(back.reward_flags == 3);
  CHECK(back.reward_reason == "tests passed");
  CHECK(back.end == MLPT_EPISODE_MAX_TURNS);
  CHECK(back.truncated);
  CHECK(back.turns == 2);
  CHECK(back.min_weight_version == 4);
  CHECK(back.max_weight_version == 5);
  CHECK(back.core_s == 0.0625);
  CHECK(back.wall_s == 2.5);  // the coordinator's timeline places the rollout by it
  CHECK(back.transcript.start_messages == t.transcript.start_messages);
  REQUIRE(back.transcript.turns.size() == 1);
  CHECK(back.transcript.turns[0].observation == json{{"done", true}});
  CHECK(back.transcript.turns[0].context_tokens == 12);
  CHECK(back.transcript.turns[0].start_s == 0.375);
  CHECK(back.transcript.reward_details == t.transcript.reward_details);
}

TEST_CASE("a damaged trajectory message is refused, naming the field") {
  mlpt::rollout::Trajectory t;
  t.tokens = {1, 2};
  t.loss_mask = {0, 1};
  t.generation_logprobs = {0, -1};
  json j = mlpt::dist::trajectory_json(t);
  json no_mask = j;
  no_mask.erase("loss_mask");
  CHECK_THROWS_WITH(mlpt::dist::trajectory_from(no_mask), Catch::Contains("loss_mask"));
  json short_mask = j;
  short_mask["loss_mask"] = json::binary({1});
  CHECK_THROWS_WITH(mlpt::dist::trajectory_from(short_mask), Catch::Contains("per-token arrays"));
  json partial = j;
  partial["tokens"] = json::binary({1, 2, 3});
  CHECK_THROWS_WITH(mlpt::dist::trajectory_from(partial), Catch::Contains("'tokens' has a partial element"));
}

TEST_CASE("an episode request crosses with its task, sampling and limits") {
  json task = {{"instance_id", "letters-3"}, {"prompt", "a word"}};
  mlpt::rollout::EpisodeRequest r;
  r.task = &task;
  r.image = "/images/x.sif";
  r.prompt_index = 12, r.sample_index = 3, r.id = 99;
  r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 0.7f, 0.95f, 20, 0xDEADBEEFCAFEull};
  r.limits.max_turns = 5, r.limits.max_sequence_length = 4096, r.limits.max_new_tokens_per_turn = 64, r.limits.agent_timeout_s = 9.5;
  r.limits.command_timeout_s = 30, r.limits.test_timeout_s = 180;
  json wire = over_the_wire(mlpt::dist::episode_json(r));
  json task_copy = wire["task"];
  auto back = mlpt::dist::episode_from(wire, &task_copy);
  CHECK(*back.task == task);
  CHECK(back.image == r.image);
  CHECK(back.prompt_index == 12);
  CHECK(back.sample_index == 3);
  CHECK(back.id == 99);
  CHECK(back.sampling.temperature == 0.7f);
  CHECK(back.sampling.top_p == 0.95f);
  CHECK(back.sampling.top_k == 20);
  CHECK(back.sampling.seed == 0xDEADBEEFCAFEull);
  CHECK(back.limits.max_turns == 5);
  CHECK(back.limits.max_sequence_length == 4096);
  CHECK(back.limits.max_new_tokens_per_turn == 64);
  CHECK(back.limits.agent_timeout_s == 9.5);
  CHECK(back.limits.command_timeout_s == 30);
  CHECK(back.limits.test_timeout_s == 180);
}

TEST_CASE("a batch share crosses with every array and the routing shape") {
  std::vector<int64_t> offsets{0, 3, 5};
  std::vector<int32_t> tokens{1, 2, 3, 4, 5};
  std::vector<uint8_t> mask{0, 1, 1, 0, 1}, truncated{0, 1};
  std::vector<float> logprobs{0, -0.5f, -0.25f, 0, -2};
  std::vector<float> advantages{1.5f, -1.5f};
  std::vector<int16_t> routed(5 * 2 * 2);
  for (size_t i = 0; i < routed.size(); ++i) routed[i] = static_cast<int16_t>(i);
  mlpt_train_batch b{};
  b.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  b.num_sequences = 2, b.offsets = offsets.data(), b.tokens = tokens.data(), b.loss_mask = mask.data();
  b.generation_logprobs = logprobs.data(), b.advantages = advantages.data(), b.truncated = truncated.data();
  b.routed_experts = routed.data(), b.num_moe_layers = 2, b.experts_per_token = 2;
  mlpt::dist::DecodedBatch d;
  mlpt::dist::batch_from(over_the_wire(mlpt::dist::batch_json(b)), d);
  REQUIRE(d.abi.num_sequences == 2);
  CHECK(std::vector<int64_t>(d.abi.offsets, d.abi.offsets + 3) == offsets);
  CHECK(std::vector<int32_t>(d.abi.tokens, d.abi.tokens + 5) == tokens);
  CHECK(std::vector<uint8_t>(d.abi.loss_mask, d.abi.loss_mask + 5) == mask);
  CHECK(std::vector<float>(d.abi.generation_logprobs, d.abi.generation_logprobs + 5) == logprobs);
  CHECK(std::vector<float>(d.abi.advantages, d.abi.advantages + 2) == advantages);
  CHECK(std::vector<uint8_t>(d.abi.truncated, d.abi.truncated + 2) == truncated);
  CHECK(std::vector<int16_t>(d.abi.routed_experts, d.abi.routed_experts + routed.size()) == routed);
  CHECK(d.abi.num_moe_layers == 2);
  CHECK(d.abi.experts_per_token == 2);
  json bad = mlpt::dist::batch_json(b);
  bad["tokens"] = json::binary({1, 0, 0, 0});
  CHECK_THROWS_WITH(mlpt::dist::batch_from(bad, d), Catch::Contains("disagree"));
}
