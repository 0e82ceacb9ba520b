#include "model/config.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

using nlohmann::json;
using sdk::Error;

namespace {

// Reads typed fields of one JSON object, naming "<where>: <path>.<key>" in every error.
class Fields {
 public:
  Fields(const json& obj, std::string where, std::string path)
      : obj_(obj), where_(std::move(where)), path_(std::move(path)) {}

  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(MLPT_INVALID_ARGUMENT, where_ + ": " + name(key) + ": " + what);
  }
  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& at(const std::string& key) const {
    if (!has(key)) fail(key, "missing");
    return obj_.at(key);
  }
  int64_t integer(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  int64_t positive(const std::string& key) const {
    int64_t v = integer(key);
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
    return v;
  }
  int64_t positive_or(const std::string& key, int64_t fallback) const {
    return has(key) ? positive(key) : fallback;
  }
  double number(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  double number_or(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }

 private:
  const json& obj_;
  std::string where_, path_;
};

}  // namespace

int64_t ModelConfig::num_attention_layers() const {
  int64_t n = 0;
  for (bool a : attention_layer) n += a;
  return n;
}

std::string ModelConfig::prefix() const {
  return variant == CheckpointVariant::qwen3_next ? "model." : "model.language_model.";
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(MLPT_NOT_FOUND, path + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(MLPT_INVALID_ARGUMENT, path + ": not valid JSON: " + e.what());
  }
}

ModelConfig parse_model_config(const json& doc, const std::string& where) {
  if (!doc.is_object()) throw Error(MLPT_INVALID_ARGUMENT, where + ": expected a JSON object");
  Fields top(doc, where, "");
  std::string model_type = top.string_or("model_type", "");
  ModelConfig c;
  const json* text = &doc;
  std::string path;
  if (model_type == "qwen3_5_moe") {
    if (!top.has("text_config") || !doc.at("text_config").is_object())
      top.fail("text_config", "missing (a qwen3_5_moe config keeps the text model there)");
    text = &doc.at("text_config");
    path = "text_config";
  } else if (model_type == "qwen3_5_moe_text") {
  } else if (model_type == "qwen3_next") {
    c.variant = CheckpointVariant::qwen3_next;
  } else {
    top.fail("model_type", model_type.empty() ? "missing"
                                              : "'" + model_type +
                                                    "' is not supported (expected qwen3_5_moe, "
                                                    "qwen3_5_moe_text or qwen3_next)");
  }
  Fields f(*text, where, path);

  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.num_heads = f.positive("num_attention_heads");
  c.num_kv_heads = f.positive("num_key_value_heads");
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  c.head_dim = f.positive_or("head_dim", c.hidden_size / c.num_heads);
  c.gdn_key_heads = f.positive("linear_num_key_heads");
  c.gdn_value_heads = f.positive("linear_num_value_heads");
  if (c.gdn_value_heads % c.gdn_key_heads != 0)
    f.fail("linear_num_value_heads", "must be a multiple of linear_num_key_heads");
  c.gdn_key_dim = f.positive("linear_key_head_dim");
  c.gdn_value_dim = f.positive("linear_value_head_dim");
  c.conv_kernel = f.positive("linear_conv_kernel_dim");
  c.num_experts = f.positive("num_experts");
  c.experts_per_token = f.positive("num_experts_per_tok");
  if (c.experts_per_token > c.num_experts) f.fail("num_experts_per_tok", "exceeds num_experts");
  if (c.num_experts > 32767) f.fail("num_experts", "more than int16 routing records can hold");
  c.moe_intermediate = f.positive("moe_intermediate_size");
  c.shared_intermediate = f.positive("shared_expert_intermediate_size");
  c.norm_topk_prob = f.boolean_or("norm_topk_prob", true);
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.positive_or("max_position_embeddings", 262144);
  c.initializer_range = f.number_or("initializer_range", 0.02);
  c.dtype = f.string_or("dtype", f.string_or("torch_dtype", top.string_or("dtype", top.string_or("torch_dtype", "bfloat16"))));

  // What this implementation assumes; say so instead of computing something else.
  if (f.string_or("hidden_act", "silu") != "silu") f.fail("hidden_act", "only silu is supported");
  if (f.boolean_or("attention_bias", false)) f.fail("attention_bias", "biases are not supported");
  if (!f.boolean_or("attn_output_gate", true)) f.fail("attn_output_gate", "only the gated attention (true) is supported");
  if (f.boolean_or("tie_word_embeddings", false) || top.boolean_or("tie_word_embeddings", false))
    f.fail("tie_word_embeddings", "tied embeddings are not supported (Qwen3.5 unties them)");
  if (c.variant == CheckpointVariant::qwen3_next) {
    if (f.has("mlp_only_layers") && !f.at("mlp_only_layers").empty())
      f.fail("mlp_only_layers", "dense layers are not supported; every layer must be MoE");
    if (f.has("decoder_sparse_step") && f.integer("decoder_sparse_step") != 1)
      f.fail("decoder_sparse_step", "must be 1 (every layer MoE)");
  }

  // RoPE: Qwen3.5 nests it in rope_parameters; Qwen3-Next keeps it at the top of the text config.
  const json* rope = f.has("rope_parameters") ? &text->at("rope_parameters") : nullptr;
  if (rope && !rope->is_object()) f.fail("rope_parameters", "expected an object");
  Fields rf(rope ? *rope : *text, where, rope ? f.name("rope_parameters") : path);
  c.rope_theta = rf.has("rope_theta") ? rf.number("rope_theta") : f.number_or("rope_theta", 10000.0);
  double partial = rf.has("partial_rotary_factor") ? rf.number("partial_rotary_factor")
                                                   : f.number_or("partial_rotary_factor", 1.0);
  if (rope && rf.string_or("rope_type", "default") != "default")
    rf.fail("rope_type", "only default rope is supported");
  double rd = partial * static_cast<double>(c.head_dim);
  c.rotary_dim = static_cast<int64_t>(std::llround(rd));
  if (partial <= 0 || partial > 1 || std::fabs(rd - static_cast<double>(c.rotary_dim)) > 1e-9 || c.rotary_dim % 2)
    rf.fail("partial_rotary_factor", "must give an even rotary dimension in (0, head_dim]");

  // Layer types: explicit list, or every full_attention_interval-th layer.
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.num_layers)
      f.fail("layer_types", "expected an array of num_hidden_layers (" + std::to_string(c.num_layers) + ") strings");
    for (size_t i = 0; i < lt.size(); ++i) {
      std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      if (t == "full_attention") c.attention_layer.push_back(true);
      else if (t == "linear_attention") c.attention_layer.push_back(false);
      else f.fail("layer_types[" + std::to_string(i) + "]", "expected full_attention or linear_attention, got " + lt[i].dump());
    }
  } else {
    int64_t interval = f.positive_or("full_attention_interval", 4);
    for (int64_t i = 0; i < c.num_layers; ++i) c.attention_layer.push_back((i + 1) % interval == 0);
  }
  c.source = doc;
  return c;
}

ModelConfig load_model_config(const std::string& path) { return parse_model_config(parse_json_file(path), path); }

ModelConfig load_checkpoint_config(const std::string& dir) { return load_model_config(dir + "/config.json"); }

int64_t parameter_count(const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  int64_t n = 2 * c.vocab_size * H + H;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    n += 2 * H;
    if (c.attention_layer[l]) {
      n += 2 * c.num_heads * c.head_dim * H + 2 * c.num_kv_heads * c.head_dim * H +
           H * c.num_heads * c.head_dim + 2 * c.head_dim;
    } else {
      n += c.conv_dim() * H + c.value_dim() * H + 2 * c.gdn_value_heads * H +
           c.conv_dim() * c.conv_kernel + 2 * c.gdn_value_heads + c.gdn_value_dim + H * c.value_dim();
    }
    n += c.num_experts * H + 3 * c.num_experts * c.moe_intermediate * H + 3 * c.shared_intermediate * H + H;
  }
  return n;
}

}  // namespace mlpt::ref
