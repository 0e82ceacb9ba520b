// A small model for the GPU model and component tests: every kind of head grouping real, two
// GDN chunks of sequence, 8 experts; weights bf16-exact so CPU and GPU start from the same values.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/cuda/model.hpp"
#include "cuda_testing.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace cuda_testing {

using mlpt::ref::ModelConfig;
using mlpt::ref::Weights;

inline ModelConfig small_config() {
  nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"}, {"vocab_size", 300}, {"hidden_size", 64}, {"num_hidden_layers", 4},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32}, {"linear_num_key_heads", 2},
      {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16}, {"linear_value_head_dim", 16},
      {"linear_conv_kernel_dim", 4}, {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
      {"shared_expert_intermediate_size", 32}, {"norm_topk_prob", true}, {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 4096},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}},
      {"initializer_range", 0.1}, {"dtype", "bfloat16"}};
  return mlpt::ref::parse_model_config({{"model_type", "qwen3_5_moe"}, {"text_config", text}}, "small_config");
}

// Weights whose bf16 tensors are exactly representable, so both sides start from the same values.
inline Weights<float> bf16_exact_weights(const ModelConfig& c, uint64_t seed) {
  Weights<float> w = mlpt::ref::init_weights<float>(c, seed);
  for (size_t i = 0; i < w.values.size(); ++i)
    if (!mlpt::ref::cuda::is_fp32_tensor(w.layout, static_cast<int>(i)))
      for (float& x : w.values[i]) x = round_bf16(x);
  return w;
}

// A directory of its own (per test binary and process), removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace cuda_testing
