#include "core/serve/completion_api.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>

#include "core/error.hpp"
#include "core/serve/routed_experts_npy.hpp"

namespace mlpt::serve {
namespace {

using nlohmann::json;

Error bad(const std::string& field, const std::string& what) {
  return Error(MLPT_INVALID_ARGUMENT, "/v1/completions: \"" + field + "\" " + what);
}

template <class T>
T number(const json& body, const char* field, T fallback) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw bad(field, "must be a number");
  return it->get<T>();
}

bool flag(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw bad(field, "must be true or false");
  return it->get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const char* field, int64_t vocab_size) {
  if (!v.is_array()) throw bad(field, "must be a list of token ids (this server takes no text)");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || (vocab_size > 0 && t.get<int64_t>() >= vocab_size))
      throw bad(field, "holds " + t.dump() + ", not a token id in [0, " + std::to_string(vocab_size) + ")");
    ids.push_back(t.get<int32_t>());
  }
  return ids;
}

std::string made_up_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(random()));
  return text;
}

const char* finish_reason_name(mlpt_finish_reason r) {
  switch (r) {
    case MLPT_FINISH_STOP: return "stop";
    case MLPT_FINISH_LENGTH: return "length";
    case MLPT_FINISH_CANCELLED: return "abort";  // vLLM's name for an aborted request
  }
  return "stop";
}

}  // namespace

void parse_completion_request(const json& body, const ServedModel& model, CompletionRequest& out) {
  if (!body.is_object()) throw Error(MLPT_INVALID_ARGUMENT, "/v1/completions: the body must be a JSON object");
  if (auto m = body.find("model"); m != body.end() && !m->is_null() && *m != model.name)
    throw Error(MLPT_NOT_FOUND, "/v1/completions: the model " + m->dump() + " does not exist (this server has \"" + model.name + "\")");
  if (!body.contains("prompt")) throw bad("prompt", "is required (a list of token ids)");
  out.prompt = token_ids(body["prompt"], "prompt", model.info.vocab_size);
  if (out.prompt.empty()) throw bad("prompt", "is empty");
  if (number<int64_t>(body, "n", 1) != 1) throw bad("n", "must be 1");
  if (flag(body, "stream")) throw bad("stream", "is not offered: ask for the whole completion");
  if (flag(body, "echo")) throw bad("echo", "is not offered");
  const int64_t logprobs = number<int64_t>(body, "logprobs", -1);
  if (logprobs > 0) throw bad("logprobs", "may be 0 at most: the engine reports the sampled token's logprob, no alternatives");
  out.logprobs = logprobs == 0;

  auto& g = out.generate;
  g.tokens = &out.prompt;
  const int64_t max_tokens = number<int64_t>(body, "max_tokens", 16);
  if (max_tokens < 1 || max_tokens > INT32_MAX) throw bad("max_tokens", "must be at least 1");
  g.max_new_tokens = static_cast<int32_t>(max_tokens);
  g.sampling.temperature = number<float>(body, "temperature", 1.0f);
  g.sampling.top_p = number<float>(body, "top_p", 1.0f);
  const int64_t top_k = number<int64_t>(body, "top_k", 0);
  g.sampling.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // vLLM: -1 or 0 disable top-k
  g.sampling.seed = number<uint64_t>(body, "seed", 0);
  if (auto stop = body.find("stop_token_ids"); stop != body.end() && !stop->is_null())
    g.stop_tokens = token_ids(*stop, "stop_token_ids", model.info.vocab_size);
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null() && !(stop->is_array() && stop->empty()))
    throw bad("stop", "is not offered (no detokenizer): use stop_token_ids");
  g.record_routed_experts = flag(body, "return_routed_experts");
  const int64_t from = number<int64_t>(body, "routed_experts_prompt_start", 0);
  if (from < 0 || static_cast<size_t>(from) > out.prompt.size())
    throw bad("routed_experts_prompt_start", "must be in [0, prompt length]");
  g.routed_experts_from = static_cast<size_t>(from);
  if (g.record_routed_experts && model.info.num_moe_layers <= 0)
    throw bad("return_routed_experts", "asks for routing of a model without MoE layers");
  auto id = body.find("request_id");
  if (id != body.end() && !id->is_null() && !id->is_string()) throw bad("request_id", "must be a string");
  out.request_id = id != body.end() && id->is_string() ? id->get<std::string>() : made_up_id();
}

json completion_response(const CompletionRequest& request, const components::Generation& generation, const ServedModel& model) {
  json choice = {{"index", 0},
                 {"text", ""},
                 {"finish_reason", finish_reason_name(generation.finish_reason)},
                 {"stop_reason", nullptr},
                 {"token_ids", generation.tokens},
                 {"prompt_token_ids", nullptr},
                 {"logprobs", nullptr},
                 {"routed_experts", nullptr}};
  const auto& stops = request.generate.stop_tokens;
  if (generation.finish_reason == MLPT_FINISH_STOP && !generation.tokens.empty() &&
      std::find(stops.begin(), stops.end(), generation.tokens.back()) != stops.end())
    choice["stop_reason"] = generation.tokens.back();
  if (request.logprobs) {
    json tokens = json::array();
    for (int32_t t : generation.tokens) tokens.push_back("token_id:" + std::to_string(t));
    choice["logprobs"] = {{"tokens", std::move(tokens)},
                          {"token_logprobs", generation.logprobs},
                          {"text_offset", std::vector<int>(generation.tokens.size(), 0)},
                          {"top_logprobs", nullptr}};
  }
  if (request.generate.record_routed_experts) {
    const size_t layers = static_cast<size_t>(model.info.num_moe_layers), k = static_cast<size_t>(model.info.experts_per_token);
    const size_t positions = layers > 0 && k > 0 ? generation.routed_experts.size() / (layers * k) : 0;
    choice["routed_experts"] = routed_experts_npy_base64(generation.routed_experts, positions, layers, k);
  }
  const size_t prompt = request.prompt.size(), completion = generation.tokens.size();
  return {{"id", "cmpl-" + request.request_id},
          {"object", "text_completion"},
          {"created", static_cast<int64_t>(std::time(nullptr))},
          {"model", model.name},
          {"choices", json::array({std::move(choice)})},
          {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}}},
          // Not in vLLM's completion: SGLang reports it in meta_info. The weights that sampled every token.
          {"weight_version", std::to_string(generation.weight_version)}};
}

json error_body(const std::string& message, int http_status) {
  const char* type = http_status == 404 ? "NotFoundError" : http_status < 500 ? "BadRequestError" : "InternalServerError";
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", http_status}}}};
}

}  // namespace mlpt::serve
