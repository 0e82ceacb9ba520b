// The HTTP engine's settings ([components.engine.settings]), read from the component's config JSON.
// Unknown keys and wrong types are errors naming the key (as in every mlpt plugin).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mlpt::engine_http {

struct Settings {
  std::string url;                 // required: http://HOST:PORT of the server
  std::string model;               // the served model's name; default: the first of GET /v1/models
  std::string api = "vllm";        // control endpoints: "vllm" (/pause, /resume, /abort_requests) or "sglang"
  int connections = 16;            // requests in flight at the server at once (one thread each)
  double connect_timeout_s = 5;    // to open a connection
  double request_timeout_s = 600;  // for one completion's response
  double control_timeout_s = 600;  // for pause (waits out running generations), resume, abort, weight updates
  double startup_timeout_s = 60;   // for the server to answer /health when the engine is created
  std::string weights_dir;         // where load_weights writes model.safetensors for the server to read
                                   // (a path both see); default: a fresh folder under the temp dir
  // What the server does not report (a plain vLLM/SGLang server): the model's facts. 0 / -1: ask it.
  int64_t vocab_size = 0, max_sequence_length = 0, num_moe_layers = -1, experts_per_token = -1;
};

// Throws mlpt::sdk::Error (MLPT_INVALID_ARGUMENT) naming the key.
Settings parse_settings(std::string_view config_json);

}  // namespace mlpt::engine_http
