// The OpenAI-compatible completions request and response as vLLM serves them (token ids in, token
// ids out), translated to and from an engine request. Only what a token-in/token-out client needs
// is accepted: `prompt` must be token ids, n = 1, no streaming, no echo, and `logprobs` at most 0
// (the sampled token's own logprob; an engine reports no alternatives). There is no detokenizer,
// so `text` is empty and `logprobs.tokens` are "token_id:N" (vLLM's return_tokens_as_token_ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/components/instances.hpp"

namespace mlpt::serve {

// What the engine reports about itself, for the response's shape and /v1/models.
struct ServedModel {
  std::string name;
  mlpt_engine_model_info info{};
};

struct CompletionRequest {
  std::string request_id;  // the caller's (vLLM `request_id`), or made up when absent
  std::vector<int32_t> prompt;
  components::GenerateRequest generate;  // generate.tokens points at `prompt`; request_id unset
  bool logprobs = false;                 // `logprobs` given (0): report the sampled tokens' logprobs
};

// Reads a /v1/completions body; throws mlpt::Error (MLPT_INVALID_ARGUMENT, or MLPT_NOT_FOUND for
// another model's name) naming the field. The returned request's generate.tokens points into itself:
// do not copy it without re-pointing.
void parse_completion_request(const nlohmann::json& body, const ServedModel& model, CompletionRequest& out);

// The /v1/completions response for a finished generation.
nlohmann::json completion_response(const CompletionRequest& request, const components::Generation& generation,
                                   const ServedModel& model);

// vLLM's error body: {"error": {"message", "type", "code"}}.
nlohmann::json error_body(const std::string& message, int http_status);

}  // namespace mlpt::serve
