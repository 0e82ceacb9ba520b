#include "model/weights.hpp"

#include <cmath>
#include <filesystem>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

using sdk::Error;

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A per-tensor stream: the values of a tensor depend only on (seed, name).
class Stream {
 public:
  Stream(uint64_t seed, const std::string& name) : state_(seed ^ fnv1a(name)) { splitmix64(state_); }
  double uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller, one value per pair of uniforms (simple and reproducible)
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace

template <class T>
Weights<T> zeros_like_layout(const ModelConfig& config) {
  Weights<T> w{config, make_layout(config), {}};
  for (const auto& t : w.layout.tensors) w.values.emplace_back(static_cast<size_t>(t.numel()), T(0));
  return w;
}

template <class T>
Weights<T> init_weights(const ModelConfig& config, uint64_t seed) {
  Weights<T> w = zeros_like_layout<T>(config);
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    Stream rng(seed, spec.name);
    auto& v = w.values[i];
    const double bound = 1.0 / std::sqrt(static_cast<double>(config.conv_kernel));
    for (auto& x : v) {
      switch (spec.init) {
        case Init::normal: x = static_cast<T>(config.initializer_range * rng.normal()); break;
        case Init::zeros: x = T(0); break;
        case Init::ones: x = T(1); break;
        case Init::a_log: x = static_cast<T>(std::log(0.01 + (16.0 - 0.01) * rng.uniform())); break;
        case Init::conv: x = static_cast<T>(bound * (2.0 * rng.uniform() - 1.0)); break;
      }
    }
  }
  return w;
}

namespace {

// Qwen3-Next stores the GDN input projections fused per key-head group, and experts one by one.
template <class T>
void load_qwen3_next_tensor(const ModelConfig& c, const SafetensorsCheckpoint& ck, const ModelLayout& layout,
                            Weights<T>& w, size_t i) {
  const TensorSpec& spec = layout.tensors[i];
  const std::string p35 = "model.language_model.";
  std::string name = spec.name;
  if (name.rfind(p35, 0) == 0) name = "model." + name.substr(p35.size());
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  auto stem = [&](const std::string& suffix) { return name.substr(0, name.size() - suffix.size()); };
  const int64_t H = c.hidden_size, dk = c.gdn_key_dim, dv = c.gdn_value_dim, Hk = c.gdn_key_heads;
  const int64_t r = c.gdn_value_heads / Hk;
  T* out = w.values[i].data();

  if (ends_with("linear_attn.in_proj_qkv.weight") || ends_with("linear_attn.in_proj_z.weight")) {
    bool qkv = ends_with("in_proj_qkv.weight");
    std::string fused = stem(qkv ? "in_proj_qkv.weight" : "in_proj_z.weight") + "in_proj_qkvz.weight";
    const int64_t group = 2 * dk + 2 * r * dv;
    std::vector<T> all(static_cast<size_t>(Hk * group * H));
    ck.read<T>(fused, {Hk * group, H}, all.data());
    auto copy_rows = [&](int64_t src_row, int64_t dst_row, int64_t rows) {
      std::copy(all.begin() + src_row * H, all.begin() + (src_row + rows) * H, out + dst_row * H);
    };
    for (int64_t g = 0; g < Hk; ++g) {
      int64_t base = g * group;
      if (qkv) {
        copy_rows(base, g * dk, dk);                                 // q
        copy_rows(base + dk, c.key_dim() + g * dk, dk);              // k
        copy_rows(base + 2 * dk, 2 * c.key_dim() + g * r * dv, r * dv);  // v
      } else {
        copy_rows(base + 2 * dk + r * dv, g * r * dv, r * dv);       // z
      }
    }
    return;
  }
  if (ends_with("linear_attn.in_proj_b.weight") || ends_with("linear_attn.in_proj_a.weight")) {
    bool b = ends_with("in_proj_b.weight");
    std::string fused = stem(b ? "in_proj_b.weight" : "in_proj_a.weight") + "in_proj_ba.weight";
    std::vector<T> all(static_cast<size_t>(2 * c.gdn_value_heads * H));
    ck.read<T>(fused, {2 * c.gdn_value_heads, H}, all.data());
    for (int64_t g = 0; g < Hk; ++g)
      std::copy(all.begin() + (g * 2 * r + (b ? 0 : r)) * H, all.begin() + (g * 2 * r + (b ? 0 : r) + r) * H,
                out + g * r * H);
    return;
  }
  if (ends_with("mlp.experts.gate_up_proj") || ends_with("mlp.experts.down_proj")) {
    bool gate_up = ends_with("gate_up_proj");
    std::string base = stem(gate_up ? "gate_up_proj" : "down_proj");
    const int64_t I = c.moe_intermediate;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      std::string ep = base + std::to_string(e) + ".";
      if (gate_up) {
        ck.read<T>(ep + "gate_proj.weight", {I, H}, out + e * 2 * I * H);
        ck.read<T>(ep + "up_proj.weight", {I, H}, out + e * 2 * I * H + I * H);
      } else {
        ck.read<T>(ep + "down_proj.weight", {H, I}, out + e * H * I);
      }
    }
    return;
  }
  ck.read<T>(name, spec.shape, out);
}

}  // namespace

template <class T>
Weights<T> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
  Weights<T> w = zeros_like_layout<T>(config);
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    if (config.variant == CheckpointVariant::qwen3_next)
      load_qwen3_next_tensor(config, checkpoint, w.layout, w, i);
    else
      checkpoint.read<T>(w.layout.tensors[i].name, w.layout.tensors[i].shape, w.values[i].data());
  }
  return w;
}

template <class T>
Weights<T> load_weights(const std::string& dir) {
  ModelConfig config = load_checkpoint_config(dir);
  SafetensorsCheckpoint ck(dir);
  return load_weights<T>(config, ck);
}

void save_checkpoint(const std::string& dir, const Weights<float>& w, Dtype dtype, size_t max_shard_bytes) {
  if (w.config.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_UNIMPLEMENTED, dir + ": saving writes Qwen3.5 names; convert a qwen3_next config first");
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i)
    tensors.push_back({w.layout.tensors[i].name, w.layout.tensors[i].shape, w.values[i].data(), dtype});
  write_checkpoint(dir, tensors, max_shard_bytes);
  write_file_atomic(dir + "/config.json", w.config.source.dump(2) + "\n");
}

template Weights<float> zeros_like_layout<float>(const ModelConfig&);
template Weights<double> zeros_like_layout<double>(const ModelConfig&);
template Weights<float> init_weights<float>(const ModelConfig&, uint64_t);
template Weights<double> init_weights<double>(const ModelConfig&, uint64_t);
template Weights<float> load_weights<float>(const std::string&);
template Weights<double> load_weights<double>(const std::string&);
template Weights<float> load_weights<float>(const ModelConfig&, const SafetensorsCheckpoint&);
template Weights<double> load_weights<double>(const ModelConfig&, const SafetensorsCheckpoint&);

}  // namespace mlpt::ref
