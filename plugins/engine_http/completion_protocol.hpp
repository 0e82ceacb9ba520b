// A generation request as an OpenAI-compatible /v1/completions call with token ids, as vLLM
// accepts it (prompt as token ids, return_token_ids, logprobs 0 with return_tokens_as_token_ids,
// stop_token_ids, ignore_eos, request_id, routed_experts_prompt_start), and the response read back
// into the request's result. mlpt serve speaks the same schema.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>
#include <mlpt/sdk.hpp>

namespace mlpt::engine_http {

struct ModelShape {
  int64_t num_moe_layers = 0, experts_per_token = 0;
};

nlohmann::json completion_body(const sdk::GenerationRequest& request, const std::string& model, const std::string& request_id);

// Fills request.out_tokens, out_logprobs, out_routed_experts (when recorded) and
// out_weight_version (`loaded_version` when the server does not say); returns the finish reason.
// Throws sdk::Error (MLPT_INTERNAL) naming what the response lacks.
mlpt_finish_reason read_completion(const nlohmann::json& response, sdk::GenerationRequest& request, const ModelShape& shape,
                                   uint64_t loaded_version);

}  // namespace mlpt::engine_http
