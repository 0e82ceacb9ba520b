#include "model/weights.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

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

// A per-tensor stream: the values of a tensor depend only on (seed, name). SplitMix64's state
// advances by the same constant at every draw, so the stream can start at any draw: a tensor's
// blocks are drawn in parallel with exactly the values of one sequential pass.
class Stream {
 public:
  Stream(uint64_t seed, const std::string& name) : state_(seed ^ fnv1a(name)) { splitmix64(state_); }
  void skip(uint64_t draws) { state_ += draws * 0x9E3779B97F4A7C15ull; }
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
Weights<T> zeros_like_layout(const ModelConfig& config, const ModelLayout& layout) {
  Weights<T> w{config, layout, {}};
  for (const auto& t : w.layout.tensors) w.values.emplace_back(static_cast<size_t>(t.numel()), T(0));
  return w;
}

template <class T>
Weights<T> zeros_like_layout(const ModelConfig& config) {
  return zeros_like_layout<T>(config, make_layout(config));
}

namespace {

// Draws per element of each Init (normal: two uniforms; zeros and ones: none).
uint64_t draws_per_element(Init init) {
  return init == Init::normal ? 2 : (init == Init::a_log || init == Init::conv) ? 1 : 0;
}

// Elements [begin, end) of tensor `spec`, as the sequential stream draws them.
template <class T>
void init_block(const ModelConfig& config, uint64_t seed, const TensorSpec& spec, T* v, size_t begin,
                size_t end) {
  Stream rng(seed, spec.name);
  rng.skip(begin * draws_per_element(spec.init));
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.conv_kernel));
  for (size_t e = begin; e < end; ++e) {
    T& x = v[e];
    switch (spec.init) {
      case Init::normal: x = static_cast<T>(config.initializer_range * rng.normal()); break;
      case Init::zeros: x = T(0); break;
      case Init::ones: x = T(1); break;
      case Init::a_log: x = static_cast<T>(std::log(0.01 + (16.0 - 0.01) * rng.uniform())); break;
      case Init::conv: x = static_cast<T>(bound * (2.0 * rng.uniform() - 1.0)); break;
    }
  }
}

// f(j) for j < count on `threads` workers taking j from one counter.
template <class F>
void parallel_for(size_t count, int threads, const F& f) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next.fetch_add(1)) < count;) f(j);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

template <class T>
Weights<T> init_weights(const ModelConfig& config, uint64_t seed, int threads) {
  Weights<T> w{config, make_layout(config), {}};
  w.values.resize(w.layout.tensors.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The tensors' memory first touched by every worker (a 1B model is 4.4 GB of fp32), then blocks
  // of every tensor drawn from one counter (~1e9 normal draws: some 30 s on one core).
  parallel_for(w.values.size(), threads,
               [&](size_t i) { w.values[i].resize(size_t(w.layout.tensors[i].numel())); });
  constexpr size_t kBlock = size_t(1) << 16;
  std::vector<std::pair<size_t, size_t>> blocks;  // (tensor, first element)
  for (size_t i = 0; i < w.values.size(); ++i)
    for (size_t b = 0; b < w.values[i].size(); b += kBlock) blocks.emplace_back(i, b);
  parallel_for(blocks.size(), threads, [&](size_t j) {
    const auto [i, b] = blocks[j];
    const size_t end = std::min(b + kBlock, w.values[i].size());
    init_block(config, seed, w.layout.tensors[i], w.values[i].data(), b, end);
  });
  return w;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A box of the fused expert tensor `name` (…mlp.experts.gate_up_proj [E, 2I, H] or …down_proj
// [E, H, I]) from one tensor per expert (…mlp.experts.{e}.{gate,up,down}_proj.weight), as Qwen3-Next
// and some published Qwen3.5 checkpoints (and every mtp.* layer) store them. False when `name` is
// not an expert tensor or the checkpoint has it fused.
template <class T>
bool read_per_expert_box(const ModelConfig& c, const SafetensorsCheckpoint& ck, const std::string& name,
                         const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, T* out) {
  const bool gate_up = ends_with(name, "mlp.experts.gate_up_proj");
  if (!gate_up && !ends_with(name, "mlp.experts.down_proj")) return false;
  const std::string base = name.substr(0, name.size() - std::string(gate_up ? "gate_up_proj" : "down_proj").size());
  if (!ck.contains(base + (gate_up ? "0.gate_proj.weight" : "0.down_proj.weight"))) return false;
  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  const int64_t per_expert = extent[1] * extent[2];
  for (int64_t j = 0; j < extent[0]; ++j) {
    const std::string ep = base + std::to_string(offset[0] + j) + ".";
    T* o = out + j * per_expert;
    if (!gate_up) {
      ck.read_box<T>(ep + "down_proj.weight", {H, I}, {offset[1], offset[2]}, {extent[1], extent[2]}, o);
      continue;
    }
    // Rows [offset[1], offset[1] + extent[1]) of the expert's [gate; up]: the gate's part, then the up's.
    const int64_t g0 = offset[1], g1 = std::min(offset[1] + extent[1], I);
    const int64_t u0 = std::max(offset[1], I), u1 = offset[1] + extent[1];
    if (g1 > g0) ck.read_box<T>(ep + "gate_proj.weight", {I, H}, {g0, offset[2]}, {g1 - g0, extent[2]}, o);
    if (u1 > u0) ck.read_box<T>(ep + "up_proj.weight", {I, H}, {u0 - I, offset[2]}, {u1 - u0, extent[2]}, o + std::max<int64_t>(g1 - g0, 0) * extent[2]);
  }
  return true;
}

// Experts [first, first + count) of the fused expert tensor `name` from one tensor per expert;
// count -1: all. False as read_per_expert_box.
template <class T>
bool read_per_expert(const ModelConfig& c, const SafetensorsCheckpoint& ck, const std::string& name, T* out,
                     int64_t first = 0, int64_t count = -1) {
  if (count < 0) count = c.num_experts - first;
  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  const bool gate_up = ends_with(name, "mlp.experts.gate_up_proj");
  return read_per_expert_box(c, ck, name, {first, 0, 0}, {count, gate_up ? 2 * I : H, gate_up ? H : I}, out);
}

// Qwen3-Next stores the GDN input projections fused per key-head group, and experts one by one.
template <class T>
void load_qwen3_next_tensor(const ModelConfig& c, const SafetensorsCheckpoint& ck, const ModelLayout& layout,
                            Weights<T>& w, size_t i) {
  const TensorSpec& spec = layout.tensors[i];
  const std::string p35 = "model.language_model.";
  std::string name = spec.name;
  if (name.rfind(p35, 0) == 0) name = "model." + name.substr(p35.size());
  auto stem = [&](const std::string& suffix) { return name.substr(0, name.size() - suffix.size()); };
  const int64_t H = c.hidden_size, dk = c.gdn_key_dim, dv = c.gdn_value_dim, Hk = c.gdn_key_heads;
  const int64_t r = c.gdn_value_heads / Hk;
  T* out = w.values[i].data();

  if (ends_with(name, "linear_attn.in_proj_qkv.weight") || ends_with(name, "linear_attn.in_proj_z.weight")) {
    bool qkv = ends_with(name, "in_proj_qkv.weight");
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
  if (ends_with(name, "linear_attn.in_proj_b.weight") || ends_with(name, "linear_attn.in_proj_a.weight")) {
    bool b = ends_with(name, "in_proj_b.weight");
    std::string fused = stem(b ? "in_proj_b.weight" : "in_proj_a.weight") + "in_proj_ba.weight";
    std::vector<T> all(static_cast<size_t>(2 * c.gdn_value_heads * H));
    ck.read<T>(fused, {2 * c.gdn_value_heads, H}, all.data());
    for (int64_t g = 0; g < Hk; ++g)
      std::copy(all.begin() + (g * 2 * r + (b ? 0 : r)) * H, all.begin() + (g * 2 * r + (b ? 0 : r) + r) * H,
                out + g * r * H);
    return;
  }
  if (read_per_expert(c, ck, name, out)) return;
  ck.read<T>(name, spec.shape, out);
}

}  // namespace

template <class T>
Weights<T> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint) {
  Weights<T> w = zeros_like_layout<T>(config);
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    if (config.variant == CheckpointVariant::qwen3_next)
      load_qwen3_next_tensor(config, checkpoint, w.layout, w, i);
    else if (checkpoint.contains(spec.name) || !read_per_expert(config, checkpoint, spec.name, w.values[i].data()))
      checkpoint.read<T>(spec.name, spec.shape, w.values[i].data());
  }
  return w;
}

template <class T>
Weights<T> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, int64_t first_expert,
                        int64_t expert_count) {
  if (first_expert < 0 || expert_count < 1 || first_expert + expert_count > config.num_experts)
    throw Error(MLPT_INVALID_ARGUMENT, "load_weights: experts [" + std::to_string(first_expert) + ", " +
                                           std::to_string(first_expert + expert_count) + ") of " +
                                           std::to_string(config.num_experts));
  if (config.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_UNIMPLEMENTED, checkpoint.dir() + ": reading a block of the experts needs Qwen3.5 names (load "
                                                       "the whole model and slice it: shard_weights)");
  ModelLayout layout = make_layout(config);
  for (const LayerTensors& L : layout.layers) {
    layout.tensors[L.moe.gate_up].shape[0] = expert_count;
    layout.tensors[L.moe.down].shape[0] = expert_count;
  }
  Weights<T> w{config, layout, {}};
  for (const auto& t : w.layout.tensors) w.values.emplace_back(static_cast<size_t>(t.numel()), T(0));
  std::vector<bool> expert_tensor(layout.tensors.size(), false);
  for (const LayerTensors& L : layout.layers) expert_tensor[L.moe.gate_up] = expert_tensor[L.moe.down] = true;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& spec = layout.tensors[i];
    if (!expert_tensor[i]) {
      checkpoint.read<T>(spec.name, spec.shape, w.values[i].data());
      continue;
    }
    std::vector<int64_t> whole = spec.shape;
    whole[0] = config.num_experts;
    if (checkpoint.contains(spec.name))  // fused [E, ...]: only this block's rows are read
      checkpoint.read_slice<T>(spec.name, whole, Slice{0, first_expert, first_expert + expert_count}, w.values[i].data());
    else if (!read_per_expert(config, checkpoint, spec.name, w.values[i].data(), first_expert, expert_count))
      checkpoint.read<T>(spec.name, whole, w.values[i].data());  // throws naming the missing tensor
  }
  return w;
}

template <class T>
void read_weight_box(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, const std::string& name,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                     const std::vector<int64_t>& extent, T* out) {
  if (checkpoint.contains(name) || !read_per_expert_box(config, checkpoint, name, offset, extent, out))
    checkpoint.read_box<T>(name, shape, offset, extent, out);  // throws naming a missing tensor
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

std::vector<TensorPiece> expert_pieces(const ModelConfig& c, const std::string& name, int64_t first_expert, int64_t count) {
  const bool gate_up = ends_with(name, "mlp.experts.gate_up_proj"), down = ends_with(name, "mlp.experts.down_proj");
  if (!gate_up && !down) return {};
  const std::string base = name.substr(0, name.rfind('.') + 1);
  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  std::vector<TensorPiece> out;
  for (int64_t j = 0; j < count; ++j) {
    const std::string ep = base + std::to_string(first_expert + j) + ".";
    if (gate_up) {
      out.push_back({ep + "gate_proj.weight", {I, H}, j * 2 * I * H});
      out.push_back({ep + "up_proj.weight", {I, H}, j * 2 * I * H + I * H});
    } else {
      out.push_back({ep + "down_proj.weight", {H, I}, j * H * I});
    }
  }
  return out;
}

std::vector<TensorPiece> pieces_like_source(const SafetensorsCheckpoint& source, const ModelConfig& c, const std::string& name,
                                            const std::vector<int64_t>& shape, int64_t first_expert) {
  if (!source.contains(name)) {
    std::vector<TensorPiece> experts = expert_pieces(c, name, first_expert, shape.at(0));
    if (!experts.empty() && source.contains(expert_pieces(c, name, 0, 1).at(0).name)) return experts;
  }
  return {TensorPiece{name, shape, 0}};
}

namespace {

// The dtype `source` stores the piece in (`fallback` when it lacks it), and of its FP8 block scales.
Dtype dtype_like_source(const SafetensorsCheckpoint& source, Dtype fallback, const std::string& name) {
  const Dtype d = source.contains(name) ? source.entry(name).dtype : fallback;
  if (d != Dtype::f8_e4m3 && !is_weight_dtype(d))
    throw Error(MLPT_INVALID_ARGUMENT, source.file_of(name) + ": tensor '" + name + "' is stored as " + dtype_code(d) +
                                           ", not a weight dtype");
  return d;
}
Dtype scale_dtype_like_source(const SafetensorsCheckpoint& source, const std::string& scale_name) {
  return source.contains(scale_name) ? source.entry(scale_name).dtype : Dtype::f32;
}

}  // namespace

std::vector<EncodedTensor> encode_like_source(const SafetensorsCheckpoint& source, Dtype fallback, const TensorPiece& piece,
                                              const float* values) {
  const Dtype d = dtype_like_source(source, fallback, piece.name);
  const float* v = values + piece.offset;
  std::vector<EncodedTensor> out;
  if (d == Dtype::f8_e4m3) {
    const std::string sname = scale_inv_name(piece.name);
    Fp8Tensor q = quantize_fp8(v, piece.shape, source.fp8_block());
    out.push_back({piece.name, piece.shape, Dtype::f8_e4m3, std::move(q.values)});
    out.push_back(encode_floats(sname, q.scale_shape, q.scale_inv.data(), scale_dtype_like_source(source, sname)));
    return out;
  }
  out.push_back(encode_floats(piece.name, piece.shape, v, d));
  return out;
}

std::vector<TensorDeclaration> declare_like_source(const SafetensorsCheckpoint& source, Dtype fallback, const TensorPiece& piece) {
  const Dtype d = dtype_like_source(source, fallback, piece.name);
  if (d != Dtype::f8_e4m3) return {{piece.name, piece.shape, d}};
  const std::string sname = scale_inv_name(piece.name);
  return {{piece.name, piece.shape, d}, {sname, fp8_scale_shape(piece.shape, source.fp8_block()), scale_dtype_like_source(source, sname)}};
}

std::set<std::string> names_written_like_source(const SafetensorsCheckpoint& source, const ModelConfig& config) {
  const ModelLayout layout = make_layout(config);
  std::set<std::string> names;
  for (const TensorSpec& spec : layout.tensors)
    for (const TensorPiece& piece : pieces_like_source(source, config, spec.name, spec.shape, 0)) {
      names.insert(piece.name);
      if (source.contains(piece.name) && source.entry(piece.name).dtype == Dtype::f8_e4m3) names.insert(scale_inv_name(piece.name));
    }
  return names;
}

void save_checkpoint_as(const std::string& dir, const Weights<float>& w, const SafetensorsCheckpoint& source,
                        size_t max_shard_bytes) {
  if (w.config.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_UNIMPLEMENTED, dir + ": saving writes Qwen3.5 names; convert a qwen3_next config first");
  const Dtype fallback = parse_dtype(w.config.dtype);
  std::vector<EncodedTensor> encoded;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    for (const TensorPiece& piece : pieces_like_source(source, w.config, spec.name, spec.shape, 0))
      for (EncodedTensor& t : encode_like_source(source, fallback, piece, w.values[i].data())) encoded.push_back(std::move(t));
  }
  std::vector<TensorToWrite> tensors;
  for (const EncodedTensor& t : encoded) tensors.push_back({t.name, t.shape, nullptr, t.dtype, t.bytes.data()});
  // Everything else the source holds (mtp.*, model.visual.*, ...), byte for byte.
  const std::set<std::string> written = names_written_like_source(source, w.config);
  for (const std::string& name : source.names()) {
    if (written.count(name)) continue;
    const TensorEntry& e = source.entry(name);
    tensors.push_back({name, e.shape, nullptr, e.dtype, source.stored_bytes(name)});
  }
  write_checkpoint(dir, tensors, max_shard_bytes);
  write_file_atomic(dir + "/config.json", w.config.source.dump(2) + "\n");
}

template Weights<float> zeros_like_layout<float>(const ModelConfig&);
template Weights<double> zeros_like_layout<double>(const ModelConfig&);
template Weights<float> zeros_like_layout<float>(const ModelConfig&, const ModelLayout&);
template Weights<double> zeros_like_layout<double>(const ModelConfig&, const ModelLayout&);
template Weights<float> init_weights<float>(const ModelConfig&, uint64_t, int);
template Weights<double> init_weights<double>(const ModelConfig&, uint64_t, int);
template void read_weight_box<float>(const ModelConfig&, const SafetensorsCheckpoint&, const std::string&, const std::vector<int64_t>&,
                                     const std::vector<int64_t>&, const std::vector<int64_t>&, float*);
template void read_weight_box<double>(const ModelConfig&, const SafetensorsCheckpoint&, const std::string&, const std::vector<int64_t>&,
                                      const std::vector<int64_t>&, const std::vector<int64_t>&, double*);
template Weights<float> load_weights<float>(const std::string&);
template Weights<double> load_weights<double>(const std::string&);
template Weights<float> load_weights<float>(const ModelConfig&, const SafetensorsCheckpoint&);
template Weights<double> load_weights<double>(const ModelConfig&, const SafetensorsCheckpoint&);
template Weights<float> load_weights<float>(const ModelConfig&, const SafetensorsCheckpoint&, int64_t, int64_t);
template Weights<double> load_weights<double>(const ModelConfig&, const SafetensorsCheckpoint&, int64_t, int64_t);

}  // namespace mlpt::ref
