// The model's shape, read from a HF config.json (docs/qwen35-architecture.md §1). Two layouts are
// accepted: Qwen3.5 MoE (`model_type` qwen3_5_moe, text part under `text_config`, or the text config
// itself, qwen3_5_moe_text) and Qwen3-Next (`qwen3_next`: same math, fused GDN input projections and
// per-expert tensors on disk, converted when loading). A missing or wrong key is an error naming
// the key and the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/parallel/model_parallel.hpp"

namespace mlpt::ref {

enum class CheckpointVariant { qwen3_5_moe, qwen3_next };

struct ModelConfig {
  CheckpointVariant variant = CheckpointVariant::qwen3_5_moe;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  std::vector<bool> attention_layer;  // per layer: true = gated full attention, false = GDN

  // Gated full attention.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;  // partial_rotary_factor * head_dim, even
  double rope_theta = 1e7;

  // Gated DeltaNet.
  int64_t gdn_key_heads = 0, gdn_value_heads = 0, gdn_key_dim = 0, gdn_value_dim = 0;
  int64_t conv_kernel = 4;

  // MoE.
  int64_t num_experts = 0, experts_per_token = 0, moe_intermediate = 0, shared_intermediate = 0;
  bool norm_topk_prob = true;

  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  double initializer_range = 0.02;
  std::string dtype = "bfloat16";  // the checkpoint dtype the config names

  // Which slice of the model these sizes describe (shard_weights.hpp): on a shard, the head counts
  // and FFN widths above are this rank's; num_experts stays the router's (all experts).
  ModelShard shard;

  // Derived sizes (§2.4).
  int64_t key_dim() const { return gdn_key_heads * gdn_key_dim; }
  int64_t value_dim() const { return gdn_value_heads * gdn_value_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t num_moe_layers() const { return num_layers; }  // every layer has a MoE FFN
  int64_t num_attention_layers() const;
  // Tensor name prefix of the text model: "model.language_model." (3.5) or "model." (Next).
  std::string prefix() const;

  // The document it was read from (written back unchanged by `mlpt model init`).
  nlohmann::json source;
};

// Parses a config document; `where` names it in errors (a path). Throws mlpt::sdk::Error.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& where);
// Reads and parses a config.json file.
ModelConfig load_model_config(const std::string& path);
// The config of a checkpoint directory (DIR/config.json).
ModelConfig load_checkpoint_config(const std::string& dir);

// Reads a whole file; throws naming the path when it cannot.
std::string read_text_file(const std::string& path);
nlohmann::json parse_json_file(const std::string& path);

// Total number of parameters the layout holds (for reports).
int64_t parameter_count(const ModelConfig& config);

}  // namespace mlpt::ref
