#include "core/dist/run_messages.hpp"

#include <cstring>

#include "core/error.hpp"

namespace mlpt::dist {
namespace {

using nlohmann::json;

// Per-token arrays travel as bytes (CBOR byte strings): compact, and floats keep every bit.
template <class T>
json bytes_of(const T* data, size_t count) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data);
  return json::binary(std::vector<uint8_t>(bytes, bytes + (data ? count * sizeof(T) : 0)));
}
template <class T>
json bytes_of(const std::vector<T>& v) {
  return bytes_of(v.data(), v.size());
}

template <class T>
std::vector<T> vector_of(const json& j, const char* field) {
  if (!j.contains(field) || !j.at(field).is_binary()) throw Error(MLPT_DATA_LOSS, std::string("run message: field '") + field + "' is missing or not bytes");
  const auto& b = j.at(field).get_binary();
  if (b.size() % sizeof(T)) throw Error(MLPT_DATA_LOSS, std::string("run message: field '") + field + "' has a partial element");
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

}  // namespace

json trajectory_json(const rollout::Trajectory& t) {
  json turns = json::array();
  for (const auto& turn : t.transcript.turns)
    turns.push_back({{"reply", turn.reply}, {"observation", turn.observation}, {"context_tokens", turn.context_tokens},
                     {"generated_tokens", turn.generated_tokens}, {"weight_version", turn.weight_version},
                     {"generation_s", turn.generation_s}, {"environment_s", turn.environment_s},
                     {"start_s", turn.start_s}});
  return {{"prompt_index", t.prompt_index}, {"sample_index", t.sample_index},
          {"tokens", bytes_of(t.tokens)}, {"loss_mask", bytes_of(t.loss_mask)},
          {"generation_logprobs", bytes_of(t.generation_logprobs)}, {"routed_experts", bytes_of(t.routed_experts)},
          {"reward", t.reward}, {"reward_flags", t.reward_flags}, {"reward_reason", t.reward_reason},
          {"end", static_cast<int>(t.end)}, {"truncated", t.truncated}, {"turns", t.turns},
          {"min_weight_version", t.min_weight_version}, {"max_weight_version", t.max_weight_version},
          {"generation_s", t.generation_s}, {"environment_s", t.environment_s}, {"reward_s", t.reward_s}, {"core_s", t.core_s},
          {"wall_s", t.wall_s},
          {"transcript", {{"start_messages", t.transcript.start_messages}, {"turns", turns},
                          {"result", t.transcript.result}, {"reward_details", t.transcript.reward_details}}}};
}

rollout::Trajectory trajectory_from(const json& j) {
  try {
    rollout::Trajectory t;
    t.prompt_index = j.at("prompt_index").get<int64_t>();
    t.sample_index = j.at("sample_index").get<int32_t>();
    t.tokens = vector_of<int32_t>(j, "tokens");
    t.loss_mask = vector_of<uint8_t>(j, "loss_mask");
    t.generation_logprobs = vector_of<float>(j, "generation_logprobs");
    t.routed_experts = vector_of<int16_t>(j, "routed_experts");
    t.reward = j.at("reward").get<double>();
    t.reward_flags = j.at("reward_flags").get<uint32_t>();
    t.reward_reason = j.at("reward_reason").get<std::string>();
    t.end = static_cast<mlpt_episode_end>(j.at("end").get<int>());
    t.truncated = j.at("truncated").get<bool>();
    t.turns = j.at("turns").get<int32_t>();
    t.min_weight_version = j.at("min_weight_version").get<uint64_t>();
    t.max_weight_version = j.at("max_weight_version").get<uint64_t>();
    t.generation_s = j.at("generation_s").get<double>();
    t.environment_s = j.at("environment_s").get<double>();
    t.reward_s = j.at("reward_s").get<double>();
    t.core_s = j.at("core_s").get<double>();
    t.wall_s = j.at("wall_s").get<double>();
    const json& tr = j.at("transcript");
    t.transcript.start_messages = tr.at("start_messages");
    t.transcript.result = tr.at("result");
    t.transcript.reward_details = tr.at("reward_details");
    for (const auto& turn : tr.at("turns")) {
      rollout::TranscriptTurn u;
      u.reply = turn.at("reply");
      u.observation = turn.at("observation");
      u.context_tokens = turn.at("context_tokens").get<int64_t>();
      u.generated_tokens = turn.at("generated_tokens").get<int64_t>();
      u.weight_version = turn.at("weight_version").get<uint64_t>();
      u.generation_s = turn.at("generation_s").get<double>();
      u.environment_s = turn.at("environment_s").get<double>();
      u.start_s = turn.at("start_s").get<double>();
      t.transcript.turns.push_back(std::move(u));
    }
    if (t.loss_mask.size() != t.tokens.size() || t.generation_logprobs.size() != t.tokens.size())
      throw Error(MLPT_DATA_LOSS, "trajectory message: per-token arrays of different lengths");
    return t;
  } catch (const json::exception& e) {
    throw Error(MLPT_DATA_LOSS, std::string("trajectory message: ") + e.what());
  }
}

json episode_json(const rollout::EpisodeRequest& r) {
  const auto& l = r.limits;
  return {{"task", r.task ? *r.task : json()}, {"image", r.image}, {"prompt_index", r.prompt_index},
          {"sample_index", r.sample_index}, {"id", r.id},
          {"sampling", {{"temperature", r.sampling.temperature}, {"top_p", r.sampling.top_p}, {"top_k", r.sampling.top_k},
                        {"seed", r.sampling.seed}}},
          {"limits", {{"max_turns", l.max_turns}, {"max_sequence_length", l.max_sequence_length},
                      {"max_new_tokens_per_turn", l.max_new_tokens_per_turn}, {"agent_timeout_s", l.agent_timeout_s},
                      {"command_timeout_s", l.command_timeout_s}, {"test_timeout_s", l.test_timeout_s}}}};
}

rollout::EpisodeRequest episode_from(const json& j, const json* task) {
  try {
    rollout::EpisodeRequest r;
    r.task = task;
    r.image = j.at("image").get<std::string>();
    r.prompt_index = j.at("prompt_index").get<int64_t>();
    r.sample_index = j.at("sample_index").get<int32_t>();
    r.id = j.at("id").get<uint64_t>();
    const json& s = j.at("sampling");
    r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, s.at("temperature").get<float>(), s.at("top_p").get<float>(),
                                      s.at("top_k").get<int32_t>(), s.at("seed").get<uint64_t>()};
    const json& l = j.at("limits");
    r.limits.max_turns = l.at("max_turns").get<int64_t>();
    r.limits.max_sequence_length = l.at("max_sequence_length").get<int64_t>();
    r.limits.max_new_tokens_per_turn = l.at("max_new_tokens_per_turn").get<int64_t>();
    r.limits.agent_timeout_s = l.at("agent_timeout_s").get<double>();
    r.limits.command_timeout_s = l.at("command_timeout_s").get<double>();
    r.limits.test_timeout_s = l.at("test_timeout_s").get<double>();
    return r;
  } catch (const json::exception& e) {
    throw Error(MLPT_DATA_LOSS, std::string("episode message: ") + e.what());
  }
}

json batch_json(const mlpt_train_batch& b) {
  const size_t n = b.num_sequences;
  const size_t tokens = static_cast<size_t>(b.offsets[n]);
  const size_t routes = b.routed_experts ? static_cast<size_t>(b.num_moe_layers * b.experts_per_token) : 0;
  return {{"offsets", bytes_of(b.offsets, n + 1)}, {"tokens", bytes_of(b.tokens, tokens)},
          {"loss_mask", bytes_of(b.loss_mask, tokens)},
          {"generation_logprobs", bytes_of(b.generation_logprobs, b.generation_logprobs ? tokens : 0)},
          {"advantages", bytes_of(b.advantages, b.advantages ? n : 0)}, {"truncated", bytes_of(b.truncated, b.truncated ? n : 0)},
          {"routed_experts", bytes_of(b.routed_experts, tokens * routes)},
          {"num_moe_layers", routes ? b.num_moe_layers : 0}, {"experts_per_token", routes ? b.experts_per_token : 0}};
}

void batch_from(const json& j, DecodedBatch& d) {
  d.offsets = vector_of<int64_t>(j, "offsets");
  d.tokens = vector_of<int32_t>(j, "tokens");
  d.loss_mask = vector_of<uint8_t>(j, "loss_mask");
  d.generation_logprobs = vector_of<float>(j, "generation_logprobs");
  d.advantages = vector_of<float>(j, "advantages");
  d.truncated = vector_of<uint8_t>(j, "truncated");
  d.routed_experts = vector_of<int16_t>(j, "routed_experts");
  if (d.offsets.empty() || d.offsets.back() != static_cast<int64_t>(d.tokens.size()) || d.loss_mask.size() != d.tokens.size())
    throw Error(MLPT_DATA_LOSS, "batch message: offsets, tokens and loss_mask disagree");
  const size_t n = d.offsets.size() - 1;
  d.abi = mlpt_train_batch{};
  d.abi.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  d.abi.num_sequences = n;
  d.abi.offsets = d.offsets.data();
  d.abi.tokens = d.tokens.data();
  d.abi.loss_mask = d.loss_mask.data();
  d.abi.generation_logprobs = d.generation_logprobs.size() == d.tokens.size() ? d.generation_logprobs.data() : nullptr;
  d.abi.advantages = d.advantages.size() == n ? d.advantages.data() : nullptr;
  d.abi.truncated = d.truncated.size() == n ? d.truncated.data() : nullptr;
  d.abi.routed_experts = d.routed_experts.empty() ? nullptr : d.routed_experts.data();
  d.abi.num_moe_layers = j.value("num_moe_layers", int64_t{0});
  d.abi.experts_per_token = j.value("experts_per_token", int64_t{0});
}

}  // namespace mlpt::dist
