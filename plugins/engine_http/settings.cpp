#include "settings.hpp"

#include <nlohmann/json.hpp>
#include <mlpt/sdk.hpp>

namespace mlpt::engine_http {

Settings parse_settings(std::string_view config_json) {
  using sdk::Error;
  const auto c = nlohmann::json::parse(config_json, nullptr, false);
  if (!c.is_object()) throw Error(MLPT_INVALID_ARGUMENT, "engine http: the settings must be a JSON object");
  Settings s;
  for (const auto& [key, v] : c.items()) {
    auto bad = [&key = key](const char* what) { return Error(MLPT_INVALID_ARGUMENT, "engine http: setting \"" + key + "\" must be " + what); };
    auto text = [&] {
      if (!v.is_string()) throw bad("a string");
      return v.get<std::string>();
    };
    auto seconds = [&] {
      if (!v.is_number() || !(v.get<double>() > 0)) throw bad("a number of seconds > 0");
      return v.get<double>();
    };
    auto integer = [&](int64_t minimum) {
      if (!v.is_number_integer() || v.get<int64_t>() < minimum) throw bad(("an integer >= " + std::to_string(minimum)).c_str());
      return v.get<int64_t>();
    };
    if (key == "url") s.url = text();
    else if (key == "model") s.model = text();
    else if (key == "api") s.api = text();
    else if (key == "connections") s.connections = static_cast<int>(integer(1));
    else if (key == "connect_timeout_s") s.connect_timeout_s = seconds();
    else if (key == "request_timeout_s") s.request_timeout_s = seconds();
    else if (key == "control_timeout_s") s.control_timeout_s = seconds();
    else if (key == "startup_timeout_s") s.startup_timeout_s = seconds();
    else if (key == "weights_dir") s.weights_dir = text();
    else if (key == "vocab_size") s.vocab_size = integer(1);
    else if (key == "max_sequence_length") s.max_sequence_length = integer(1);
    else if (key == "num_moe_layers") s.num_moe_layers = integer(0);
    else if (key == "experts_per_token") s.experts_per_token = integer(0);
    else
      throw Error(MLPT_INVALID_ARGUMENT, "engine http: unknown setting \"" + key +
                                             "\" (known: url, model, api, connections, connect_timeout_s, request_timeout_s, "
                                             "control_timeout_s, startup_timeout_s, weights_dir, vocab_size, max_sequence_length, "
                                             "num_moe_layers, experts_per_token)");
  }
  if (s.url.empty()) throw Error(MLPT_INVALID_ARGUMENT, "engine http: setting \"url\" (http://HOST:PORT of the server) is required");
  if (s.url.rfind("http://", 0) != 0 && s.url.rfind("https://", 0) != 0)
    throw Error(MLPT_INVALID_ARGUMENT, "engine http: url \"" + s.url + "\" must start with http:// or https://");
  while (!s.url.empty() && s.url.back() == '/') s.url.pop_back();
  if (s.api != "vllm" && s.api != "sglang") throw Error(MLPT_INVALID_ARGUMENT, "engine http: api must be \"vllm\" or \"sglang\", got \"" + s.api + "\"");
  return s;
}

}  // namespace mlpt::engine_http
