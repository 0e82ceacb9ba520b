// HF config.json parsing: the shipped configs, both layouts, and errors that name the key.
#include <catch2/catch.hpp>

#include "model/config.hpp"
#include "model/layout.hpp"
#include "model_fixtures.hpp"
#include "mlpt/sdk/error.hpp"

using mlpt::ref::CheckpointVariant;
using mlpt::ref::load_model_config;
using mlpt::ref::parse_model_config;
using nlohmann::json;

namespace {
std::string parse_error(const json& doc) {
  try {
    parse_model_config(doc, "cfg.json");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    return e.what();
  }
  FAIL("expected the config to be refused: " << doc.dump());
  return {};
}
}  // namespace

TEST_CASE("the shipped model configs parse, with the 3:1 GDN/attention pattern") {
  auto tiny = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  CHECK(tiny.num_layers == 4);
  CHECK(tiny.attention_layer == std::vector<bool>{false, false, false, true});
  CHECK(tiny.vocab_size == 1152);
  CHECK(tiny.rotary_dim == tiny.head_dim / 4);
  CHECK(tiny.rope_theta == 1e7);
  int64_t tiny_params = mlpt::ref::parameter_count(tiny);
  CHECK(tiny_params > 1'000'000);
  CHECK(tiny_params < 10'000'000);
  // The layout holds exactly the counted parameters.
  int64_t sum = 0;
  for (auto& t : mlpt::ref::make_layout(tiny).tensors) sum += t.numel();
  CHECK(sum == tiny_params);

  auto small = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/small-100m.json");
  CHECK(small.vocab_size == 151936);
  CHECK(mlpt::ref::parameter_count(small) > 80'000'000);
  CHECK(mlpt::ref::parameter_count(small) < 130'000'000);
}

TEST_CASE("config fields: derived sizes, defaults and the Qwen3-Next layout") {
  auto c = mlpt_test::micro_config();
  CHECK(c.variant == CheckpointVariant::qwen3_5_moe);
  CHECK(c.key_dim() == 4);
  CHECK(c.value_dim() == 8);
  CHECK(c.conv_dim() == 16);
  CHECK(c.rotary_dim == 4);
  CHECK(c.prefix() == "model.language_model.");

  json next = mlpt_test::micro_config_json()["text_config"];
  next["model_type"] = "qwen3_next";
  next.erase("rope_parameters");
  next["rope_theta"] = 5e6;
  next["partial_rotary_factor"] = 0.25;
  next["full_attention_interval"] = 2;
  auto n = parse_model_config(next, "next.json");
  CHECK(n.variant == CheckpointVariant::qwen3_next);
  CHECK(n.rope_theta == 5e6);
  CHECK(n.rotary_dim == 2);
  CHECK(n.attention_layer == std::vector<bool>{false, true, false, true});
  CHECK(n.prefix() == "model.");
}

TEST_CASE("bad configs are refused with the file and the key named") {
  json base = mlpt_test::micro_config_json();
  auto with = [&](auto&& edit) {
    json d = base;
    edit(d["text_config"]);
    return d;
  };
  CHECK_THAT(parse_error(with([](json& t) { t.erase("hidden_size"); })),
             Catch::Contains("cfg.json: text_config.hidden_size: missing"));
  CHECK_THAT(parse_error(with([](json& t) { t["num_experts"] = "many"; })),
             Catch::Contains("text_config.num_experts: expected an integer"));
  CHECK_THAT(parse_error(with([](json& t) { t["num_key_value_heads"] = 3; })),
             Catch::Contains("text_config.num_key_value_heads: must divide"));
  CHECK_THAT(parse_error(with([](json& t) { t["layer_types"] = {"linear_attention"}; })),
             Catch::Contains("text_config.layer_types"));
  CHECK_THAT(parse_error(with([](json& t) {
               t["layer_types"] = {"linear_attention", "linear_attention", "sliding", "full_attention"};
             })),
             Catch::Contains("layer_types[2]"));
  CHECK_THAT(parse_error(with([](json& t) { t["rope_parameters"]["partial_rotary_factor"] = 0.3; })),
             Catch::Contains("text_config.rope_parameters.partial_rotary_factor"));
  CHECK_THAT(parse_error(with([](json& t) { t["hidden_act"] = "gelu"; })), Catch::Contains("hidden_act"));
  CHECK_THAT(parse_error(with([](json& t) { t["num_experts_per_tok"] = 9; })),
             Catch::Contains("num_experts_per_tok: exceeds num_experts"));
  CHECK_THAT(parse_error(json{{"model_type", "llama"}}), Catch::Contains("model_type: 'llama' is not supported"));
  CHECK_THAT(parse_error(json{{"model_type", "qwen3_5_moe"}}), Catch::Contains("text_config: missing"));
  CHECK_THAT(parse_error(json::array()), Catch::Contains("expected a JSON object"));
  try {
    load_model_config("/nonexistent/config.json");
    FAIL("should throw");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_NOT_FOUND);
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/config.json"));
  }
}
