#include "completion_protocol.hpp"

#include "routed_experts_npy.hpp"

namespace mlpt::engine_http {

using nlohmann::json;
using sdk::Error;

json completion_body(const sdk::GenerationRequest& r, const std::string& model, const std::string& request_id) {
  json body = {{"model", model},
               {"prompt", r.tokens},
               {"max_tokens", r.max_new_tokens},
               {"n", 1},
               {"stream", false},
               {"temperature", r.sampling.temperature},
               {"top_p", r.sampling.top_p},
               {"top_k", r.sampling.top_k > 0 ? r.sampling.top_k : -1},
               // vLLM takes a signed 64-bit seed: the top bit is dropped (still one seed per seed).
               {"seed", r.sampling.seed & 0x7fffffffffffffffull},
               {"stop_token_ids", r.stop_tokens},
               {"ignore_eos", true},  // the host's stop tokens are the only ones
               {"skip_special_tokens", false},
               {"logprobs", 0},
               {"return_tokens_as_token_ids", true},
               {"return_token_ids", true},
               {"request_id", request_id}};
  if (r.record_routed_experts) {
    body["return_routed_experts"] = true;
    body["routed_experts_prompt_start"] = r.routed_experts_from;
  }
  return body;
}

mlpt_finish_reason read_completion(const json& response, sdk::GenerationRequest& r, const ModelShape& shape, uint64_t loaded_version) {
  auto lacks = [](const std::string& what) { return Error(MLPT_INTERNAL, "engine http: the completion response " + what); };
  if (!response.is_object() || !response.contains("choices") || !response["choices"].is_array() || response["choices"].empty())
    throw lacks("has no choices");
  const json& choice = response["choices"][0];
  const json logprobs = choice.value("logprobs", json());
  r.out_tokens.clear();
  if (choice.contains("token_ids") && choice["token_ids"].is_array()) {
    for (const auto& t : choice["token_ids"]) r.out_tokens.push_back(t.get<int32_t>());
  } else if (logprobs.is_object() && logprobs.value("tokens", json()).is_array()) {  // "token_id:N" (return_tokens_as_token_ids)
    for (const auto& t : logprobs["tokens"]) {
      const std::string text = t.is_string() ? t.get<std::string>() : "";
      if (text.rfind("token_id:", 0) != 0) throw lacks("has token text " + t.dump() + ", not token_id:N (return_tokens_as_token_ids)");
      r.out_tokens.push_back(std::stoi(text.substr(9)));
    }
  } else {
    throw lacks("has neither choices[0].token_ids (return_token_ids) nor logprobs.tokens as token ids");
  }
  if (r.out_tokens.size() > static_cast<size_t>(r.max_new_tokens))
    throw lacks("has " + std::to_string(r.out_tokens.size()) + " tokens, more than max_tokens " + std::to_string(r.max_new_tokens));
  if (!logprobs.is_object() || !logprobs.value("token_logprobs", json()).is_array() || logprobs["token_logprobs"].size() != r.out_tokens.size())
    throw lacks("has no logprobs.token_logprobs with one entry per token");
  r.out_logprobs.clear();
  for (const auto& lp : logprobs["token_logprobs"]) {
    if (!lp.is_number()) throw lacks("has a token logprob " + lp.dump());
    r.out_logprobs.push_back(lp.get<float>());
  }
  if (r.record_routed_experts) {
    const json& routed = choice.value("routed_experts", json());
    if (!routed.is_string())
      throw lacks("has no routed_experts (mlpt serve offers them; vLLM needs --enable-return-routed-experts)");
    const size_t positions = r.tokens.size() + r.out_tokens.size() - r.routed_experts_from;
    r.out_routed_experts = routed_experts_from_npy_base64(routed.get<std::string>(), positions, static_cast<size_t>(shape.num_moe_layers),
                                                          static_cast<size_t>(shape.experts_per_token));
  }
  r.out_weight_version = loaded_version;
  if (auto v = response.find("weight_version"); v != response.end() && v->is_string()) r.out_weight_version = std::stoull(v->get<std::string>());
  const std::string reason = choice.value("finish_reason", json()).is_string() ? choice["finish_reason"].get<std::string>() : "";
  if (reason == "stop") return MLPT_FINISH_STOP;
  if (reason == "length") return MLPT_FINISH_LENGTH;
  if (reason == "abort" || reason == "cancelled") return MLPT_FINISH_CANCELLED;
  throw lacks("has finish_reason " + choice.value("finish_reason", json()).dump() + " (known: stop, length, abort)");
}

}  // namespace mlpt::engine_http
