// Real checkpoints as published: FP8 block-scaled tensors (checked against an independent float64
// reader in Python), slices read as stored, per-expert names, mtp.* and vision tensors that the
// model does not use written back byte for byte, corrupt shards named, and mapped pages released.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "mlpt/sdk/error.hpp"
#include "model_fixtures.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt::ref;
using mlpt_test::TempDir;
using nlohmann::json;

namespace {

// Runs the independent Python reader/writer; its output parsed as JSON (null when it prints none).
json python(const std::string& cmd, const std::string& file) {
  int status = 0;
  std::string out = mlpt_test::run_command(std::string(MLPT_PYTHON) + " " + MLPT_REFERENCE_TEST_DIR +
                                               "/safetensors_ref.py " + cmd + " " + file, &status);
  REQUIRE(status == 0);
  return out.empty() ? json() : json::parse(out);
}

std::string error_of(const std::function<void()>& f, mlpt_error_code* code = nullptr) {
  try {
    f();
  } catch (const mlpt::sdk::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  FAIL("expected an error");
  return {};
}

// Resident file-backed memory of this process, from /proc (kB).
long rss_file_kb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long v = -1;
  while (in >> key) {
    if (key == "RssFile:") {
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return v;
}

}  // namespace

TEST_CASE("FP8 E4M3: every code decodes and re-encodes to itself, narrowing rounds to nearest even and saturates") {
  for (int c = 0; c < 256; ++c) {
    float v = f8_e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(v));
      continue;
    }
    INFO("code " << c << " = " << v);
    CHECK(float_to_f8_e4m3(v) == (c == 0x80 ? 0x80 : c));
  }
  CHECK(f8_e4m3_to_float(0x7e) == 448.0f);
  CHECK(f8_e4m3_to_float(0x01) == 0x1.0p-9f);  // smallest subnormal
  CHECK(f8_e4m3_to_float(0x08) == 0x1.0p-6f);  // smallest normal
  CHECK(float_to_f8_e4m3(1e6f) == 0x7e);
  CHECK(float_to_f8_e4m3(-1e6f) == 0xfe);
  CHECK(f8_e4m3_to_float(float_to_f8_e4m3(1.0625f)) == 1.0f);    // halfway between 1 and 1.125: to even
  CHECK(f8_e4m3_to_float(float_to_f8_e4m3(1.1875f)) == 1.25f);   // halfway between 1.125 and 1.25: to even
  CHECK(f8_e4m3_to_float(float_to_f8_e4m3(0x1.8p-10f)) == 0x1.0p-9f);
}

TEST_CASE("FP8 block-scaled tensors dequantise exactly as an independent float64 reader, whole and sliced") {
  TempDir dir("fp8");
  python("write-fp8", dir / "model.safetensors");
  json want = python("dequant", dir / "model.safetensors");
  SafetensorsCheckpoint ck(dir.str());
  CHECK(ck.fp8_block() == std::pair<int64_t, int64_t>{128, 128});
  std::vector<double> a(200 * 300), b(2 * 130 * 129);
  ck.read<double>("a.weight", {200, 300}, a.data());
  ck.read<double>("b.weight", {2, 130, 129}, b.data());
  REQUIRE(want["a.weight"].size() == a.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += want["a.weight"][i].get<double>() != a[i];
  for (size_t i = 0; i < b.size(); ++i) bad += want["b.weight"][i].get<double>() != b[i];
  CHECK(bad == 0);
  // A slice (rows 100..199 of a; columns 110..128 of b, across a block edge) is the same values.
  std::vector<double> rows(100 * 300), cols(2 * 130 * 19);
  ck.read_slice<double>("a.weight", {200, 300}, Slice{0, 100, 200}, rows.data());
  CHECK(std::equal(rows.begin(), rows.end(), a.begin() + 100 * 300));
  ck.read_slice<double>("b.weight", {2, 130, 129}, Slice{2, 110, 129}, cols.data());
  bad = 0;
  for (int64_t k = 0; k < 2 * 130; ++k)
    for (int64_t c = 0; c < 19; ++c) bad += cols[k * 19 + c] != b[k * 129 + 110 + c];
  CHECK(bad == 0);
  // A box across block edges in two dims (rows 1..129 of b's second matrix, columns 5..133 of a's
  // rows 60..190) too: what a tensor-parallel rank of a column split reads.
  std::vector<double> box(1 * 128 * 20);
  ck.read_box<double>("b.weight", {2, 130, 129}, {1, 1, 100}, {1, 128, 20}, box.data());
  bad = 0;
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 0; c < 20; ++c) bad += box[r * 20 + c] != b[(130 + 1 + r) * 129 + 100 + c];
  std::vector<double> a_box(130 * 128);
  ck.read_box<double>("a.weight", {200, 300}, {60, 5}, {130, 128}, a_box.data());
  for (int64_t r = 0; r < 130; ++r)
    for (int64_t c = 0; c < 128; ++c) bad += a_box[r * 128 + c] != a[(60 + r) * 300 + 5 + c];
  CHECK(bad == 0);
  CHECK_THAT(error_of([&] { ck.read_box<double>("a.weight", {200, 300}, {60, 5}, {130, 296}, a_box.data()); }),
             Catch::Contains("outside shape [200, 300]"));
  // Raw slices of a block-scaled tensor would lose their scales: refused, with the way out named.
  CHECK_THAT(error_of([&] { ck.read_raw_slice("a.weight", Slice{0, 0, 10}); }), Catch::Contains("read_slice"));
}

TEST_CASE("slices are read as stored: BF16 stays BF16, only the slice's bytes") {
  TempDir dir("slice");
  std::vector<float> v(4 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 3.0f;
  write_checkpoint(dir.str(), {{"w", {4, 6}, v.data(), Dtype::bf16}});
  SafetensorsCheckpoint ck(dir.str());
  HostTensor t = ck.read_raw_slice("w", Slice{1, 2, 5});
  CHECK(t.dtype == Dtype::bf16);
  CHECK(t.shape == std::vector<int64_t>{4, 3});
  REQUIRE(t.bytes.size() == 4 * 3 * 2);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      uint16_t got;
      std::memcpy(&got, t.bytes.data() + 2 * (r * 3 + c), 2);
      CHECK(got == float_to_bf16(v[r * 6 + 2 + c]));
    }
  CHECK_THAT(error_of([&] { ck.read_raw_slice("w", Slice{1, 4, 7}); }), Catch::Contains("outside shape [4, 6]"));
  CHECK_THAT(error_of([&] { ck.read_raw_slice("w", Slice{2, 0, 1}); }), Catch::Contains("of dim 2"));
}

TEST_CASE("a published-style checkpoint (BF16, FP8, per-expert names, mtp.* and vision) loads and saves back whole") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = init_weights<float>(c, 7);
  for (auto& t : w.values)  // non-trivial norms and biases too
    for (size_t i = 0; i < t.size(); ++i) t[i] += 0.01f * static_cast<float>(i % 7);
  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  // Source: experts one tensor each (BF16), in_proj_qkv and o_proj in FP8 (8 x 8 blocks, from the
  // config), the rest BF16, plus tensors the model does not use.
  std::vector<TensorToWrite> out;
  std::vector<std::unique_ptr<Fp8Tensor>> fp8;
  const std::pair<int64_t, int64_t> block{8, 8};
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const auto& spec = w.layout.tensors[i];
    const float* v = w.values[i].data();
    const std::string base = spec.name.substr(0, spec.name.rfind('.') + 1);
    if (spec.name.find("experts.gate_up_proj") != std::string::npos) {
      for (int64_t e = 0; e < c.num_experts; ++e) {
        out.push_back({base + std::to_string(e) + ".gate_proj.weight", {I, H}, v + e * 2 * I * H, Dtype::bf16});
        out.push_back({base + std::to_string(e) + ".up_proj.weight", {I, H}, v + e * 2 * I * H + I * H, Dtype::bf16});
      }
    } else if (spec.name.find("experts.down_proj") != std::string::npos) {
      for (int64_t e = 0; e < c.num_experts; ++e)
        out.push_back({base + std::to_string(e) + ".down_proj.weight", {H, I}, v + e * H * I, Dtype::bf16});
    } else if (spec.name.find("in_proj_qkv") != std::string::npos || spec.name.find("o_proj") != std::string::npos) {
      fp8.push_back(std::make_unique<Fp8Tensor>(quantize_fp8(v, spec.shape, block)));
      out.push_back({spec.name, spec.shape, nullptr, Dtype::f8_e4m3, fp8.back()->values.data()});
      out.push_back({scale_inv_name(spec.name), fp8.back()->scale_shape, fp8.back()->scale_inv.data(), Dtype::f32});
    } else {
      out.push_back({spec.name, spec.shape, v, Dtype::bf16});
    }
  }
  std::vector<float> mtp(I * H, 0.375f), visual(3 * H);
  for (size_t i = 0; i < visual.size(); ++i) visual[i] = static_cast<float>(i) * -0.5f;
  std::vector<int64_t> pos{0, 1, 2, -7};
  out.push_back({"mtp.layers.0.mlp.experts.0.gate_proj.weight", {I, H}, mtp.data(), Dtype::bf16});
  fp8.push_back(std::make_unique<Fp8Tensor>(quantize_fp8(visual.data(), {3, H}, block)));
  out.push_back({"mtp.fc.weight", {3, H}, nullptr, Dtype::f8_e4m3, fp8.back()->values.data()});
  out.push_back({"mtp.fc.weight_scale_inv", fp8.back()->scale_shape, fp8.back()->scale_inv.data(), Dtype::f32});
  out.push_back({"model.visual.blocks.0.attn.qkv.weight", {3, H}, visual.data(), Dtype::f16});
  out.push_back({"model.visual.pos_ids", {4}, nullptr, Dtype::i64, reinterpret_cast<const std::byte*>(pos.data())});
  TempDir dir("published");
  write_checkpoint(dir / "src", out, 6000);  // several shards and an index
  json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["dtype"] = "bfloat16";
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {8, 8}}};
  write_file_atomic(dir / "src/config.json", cfg.dump());

  Weights<float> loaded = load_weights<float>(dir / "src");
  for (size_t i = 0; i < w.values.size(); ++i) {
    const auto& name = w.layout.tensors[i].name;
    INFO(name);
    bool is_fp8 = name.find("in_proj_qkv") != std::string::npos || name.find("o_proj") != std::string::npos;
    for (size_t j = 0; j < w.values[i].size(); ++j) {
      float x = w.values[i][j];
      if (is_fp8)  // within one FP8 step of the block's scale
        REQUIRE(std::fabs(loaded.values[i][j] - x) <= std::fabs(x) * 0.0625f + 1e-6f);
      else
        REQUIRE(loaded.values[i][j] == bf16_to_float(float_to_bf16(x)));
    }
  }

  SafetensorsCheckpoint src(dir / "src");
  save_checkpoint_as(dir / "saved", loaded, src, 6000);
  REQUIRE(std::filesystem::exists(dir / "saved/model.safetensors.index.json"));
  SafetensorsCheckpoint saved(dir / "saved");
  CHECK(saved.names() == src.names());  // every tensor, nothing more
  size_t differing = 0;
  for (const std::string& name : src.names()) {
    INFO(name);
    CHECK(saved.entry(name).dtype == src.entry(name).dtype);
    CHECK(saved.entry(name).shape == src.entry(name).shape);
    if (src.entry(name).dtype == Dtype::f8_e4m3 || name.find("_scale_inv") != std::string::npos) continue;
    HostTensor a = src.read_raw(name), b = saved.read_raw(name);
    differing += a.bytes != b.bytes;  // BF16 -> float -> BF16 and carried tensors: the same bytes
  }
  CHECK(differing == 0);
  // Re-quantised FP8 reloads to what was loaded, within one FP8 step.
  Weights<float> again = load_weights<float>(dir / "saved");
  for (size_t i = 0; i < w.values.size(); ++i)
    for (size_t j = 0; j < w.values[i].size(); ++j)
      REQUIRE(std::fabs(again.values[i][j] - loaded.values[i][j]) <= std::fabs(loaded.values[i][j]) * 0.0625f + 1e-6f);
  // An independent reader sees the carried tensors with their values.
  std::string shard = saved.file_of("model.visual.pos_ids");
  json py = python("read", shard);
  CHECK(py["model.visual.pos_ids"]["dtype"] == "I64");
  CHECK(py["model.visual.pos_ids"]["values"] == json::array({0, 1, 2, -7}));
  CHECK(json::parse(mlpt_test::read_bytes(dir / "saved/config.json"))["quantization_config"]["weight_block_size"] ==
        json::array({8, 8}));
  // A rank of an expert-parallel layout reads only its experts (per-expert names here, fused in the
  // saved copy) and gets exactly the slices of the whole model.
  for (const auto* folder : {"src", "saved"})
    for (int ep : {2, 4})
      for (int r = 0; r < ep; ++r) {
        INFO(folder << " ep " << ep << " rank " << r);
        const ModelShard shard{1, 0, ep, r};
        const Weights<float> expected = shard_weights(load_weights<float>(dir / folder), shard);
        const Weights<float> read = load_shard_weights<float>(dir / folder, shard);
        CHECK(read.values == expected.values);
        CHECK(read.values[read.layout.layers[0].moe.gate_up].size() == static_cast<size_t>(2 * I * H * c.num_experts / ep));
      }
}

TEST_CASE("a tensor- and expert-parallel rank reads its shard of a checkpoint: the slices of the whole model") {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  TempDir dir("shard");
  save_checkpoint(dir / "ck", init_weights<float>(c, 3), Dtype::bf16, 1 << 20);
  const Weights<float> whole = load_weights<float>(dir / "ck");
  for (int r = 0; r < 4; ++r) {
    const ModelShard shard = ModelShard::of_world_rank(2, 2, r);
    INFO("tp 2 x ep 2, world rank " << r);
    const Weights<float> read = load_shard_weights<float>(dir / "ck", shard);
    CHECK(read.config.num_heads == c.num_heads / 2);
    CHECK(read.values == shard_weights(whole, shard).values);
  }
  // TP4: the 2 KV heads replicate, but the 2 GDN key heads do not split.
  CHECK_THROWS_WITH(load_shard_weights<float>(dir / "ck", ModelShard{4, 0, 1, 0}),
                    Catch::Contains("linear_num_key_heads 2 do not split over tp 4"));
  CHECK_THROWS_WITH(load_shard_weights<float>(dir / "ck", ModelShard{3, 0, 1, 0}),
                    Catch::Contains("num_attention_heads 4 do not split over tp 3"));
}

TEST_CASE("with KV heads replicated (TP4 and TP8 over 2 KV heads) each rank reads its query heads' KV head") {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny-tp8.json");
  TempDir dir("shard_kv");
  save_checkpoint(dir / "ck", init_weights<float>(c, 3), Dtype::bf16, 1 << 20);
  const Weights<float> whole = load_weights<float>(dir / "ck");
  const LayerTensors& attention = whole.layout.layers[3];
  REQUIRE(attention.attention);
  const int64_t kv_rows = c.head_dim * c.hidden_size;  // one KV head's rows of k_proj
  for (int tp : {4, 8})
    for (int r = 0; r < tp; ++r) {
      INFO("tp " << tp << ", rank " << r);
      const ModelShard shard = ModelShard::of_world_rank(tp, 1, r);
      const Weights<float> read = load_shard_weights<float>(dir / "ck", shard);
      CHECK(read.config.num_kv_heads == 1);
      CHECK(read.config.shard.kv_replicas == tp / 2);
      CHECK(read.values == shard_weights(whole, shard).values);
      // Query heads [r·8/tp, (r+1)·8/tp) read KV head ⌊r·2/tp⌋ (GQA groups of 4 query heads).
      const int64_t head = r * 2 / tp;
      const std::vector<float>& k = whole.values[attention.attn.k];
      CHECK(read.values[attention.attn.k] ==
            std::vector<float>(k.begin() + head * kv_rows, k.begin() + (head + 1) * kv_rows));
    }
  CHECK_THROWS_WITH(load_shard_weights<float>(dir / "ck", ModelShard{16, 0, 1, 0}),
                    Catch::Contains("num_attention_heads 8 do not split over tp 16"));
}

TEST_CASE("a tensor- and expert-parallel rank reads only the bytes of its slices: half of each tensor TP=2 splits") {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  TempDir dir("shard_bytes");
  save_checkpoint(dir / "ck", init_weights<float>(c, 3), Dtype::bf16, 1 << 20);
  uint64_t whole_bytes = 0;
  for (const TensorSpec& t : make_layout(c).tensors) whole_bytes += static_cast<uint64_t>(t.numel()) * 2;
  for (const auto& [tp, ep] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}})
    for (int r = 0; r < tp * ep; ++r) {
      INFO("tp " << tp << " x ep " << ep << ", rank " << r);
      const SafetensorsCheckpoint ck(dir / "ck");
      const Weights<float> w = read_shard_weights<float>(c, ck, ModelShard::of_world_rank(tp, ep, r));
      uint64_t held = 0;  // BF16: two bytes per element this rank holds, and not one more
      for (const TensorSpec& t : w.layout.tensors) held += static_cast<uint64_t>(t.numel()) * 2;
      CHECK(ck.bytes_read() == held);
      CHECK(ck.bytes_read() < whole_bytes);
      if (r == 0)
        WARN("tp " << tp << " x ep " << ep << ": a rank reads " << ck.bytes_read() << " of the checkpoint's " << whole_bytes
                   << " bytes (" << 100.0 * double(ck.bytes_read()) / double(whole_bytes) << "%)");
    }
  // Each split tensor: a TP=2 rank reads half of it, rows (q_proj) or row segments (o_proj).
  const ModelLayout whole = make_layout(c);
  const ModelLayout half = make_layout(shard_config(c, ModelShard::of_world_rank(2, 1, 1)));
  for (const LayerTensors& l : whole.layers) {
    if (!l.attention) continue;
    for (int t : {l.attn.q, l.attn.o, l.moe.shared_down}) {
      const SafetensorsCheckpoint ck(dir / "ck");
      const TensorSpec& spec = whole.tensors[static_cast<size_t>(t)];
      const Weights<float> w = read_shard_weights<float>(c, ck, ModelShard::of_world_rank(2, 1, 1));
      const TensorEntry& e = ck.entry(spec.name);
      INFO(spec.name);
      CHECK(half.tensors[static_cast<size_t>(t)].numel() * 2 == spec.numel());
      std::vector<float> one(static_cast<size_t>(half.tensors[static_cast<size_t>(t)].numel()));
      const uint64_t before = ck.bytes_read();
      const std::vector<ShardPlacement> p = shard_placements(c, w.layout, ModelShard::of_world_rank(2, 1, 1));
      for (const ShardBox& box : p[static_cast<size_t>(t)].boxes)
        ck.read_box<float>(spec.name, spec.shape, box.global_offset, box.extent, one.data());
      CHECK(ck.bytes_read() - before == (e.end - e.begin) / 2);
      CHECK(one == w.values[static_cast<size_t>(t)]);
    }
    break;
  }
}

TEST_CASE("a corrupt or incomplete shard is refused with the shard and the tensor named") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = init_weights<float>(c, 3);
  TempDir dir("corrupt");
  save_checkpoint(dir.str(), w, Dtype::bf16, 4096);
  json index = json::parse(mlpt_test::read_bytes(dir / "model.safetensors.index.json"));
  std::string shard = index["weight_map"]["lm_head.weight"];
  std::string bytes = mlpt_test::read_bytes(dir / shard);
  mlpt_test::write_bytes(dir / shard, bytes.substr(0, bytes.size() - 10));  // truncated copy
  mlpt_error_code code{};
  std::string msg = error_of([&] { load_weights<float>(dir.str()); }, &code);
  CHECK(code == MLPT_DATA_LOSS);
  CHECK_THAT(msg, Catch::Contains(shard));
  CHECK_THAT(msg, Catch::Contains("truncated"));
  // An FP8 tensor whose block scale is missing.
  std::vector<std::byte> q(16, std::byte{0x38});
  write_checkpoint(dir / "noscale", {{"x.weight", {4, 4}, nullptr, Dtype::f8_e4m3, q.data()}});
  std::vector<float> out(16);
  msg = error_of([&] { SafetensorsCheckpoint(dir / "noscale").read<float>("x.weight", {4, 4}, out.data()); }, &code);
  CHECK(code == MLPT_NOT_FOUND);
  CHECK_THAT(msg, Catch::Contains("no block scale 'x.weight_scale_inv'"));
  // A scale of the wrong block shape, and an integer tensor read as a weight.
  std::vector<float> s(4, 1.0f);
  std::vector<int64_t> ids(4, 1);
  write_checkpoint(dir / "badscale", {{"x.weight", {4, 4}, nullptr, Dtype::f8_e4m3, q.data()},
                                      {"x.weight_scale_inv", {2, 2}, s.data(), Dtype::f32},
                                      {"ids", {4}, nullptr, Dtype::i64, reinterpret_cast<const std::byte*>(ids.data())}});
  SafetensorsCheckpoint bad(dir / "badscale");
  CHECK_THAT(error_of([&] { bad.read<float>("x.weight", {4, 4}, out.data()); }), Catch::Contains("need [1, 1]"));
  CHECK_THAT(error_of([&] { bad.read<float>("ids", {4}, out.data()); }), Catch::Contains("dtype I64, not a weight dtype"));
}

TEST_CASE("reading a tensor hands its mapped pages back: the file is not resident after the copy") {
  TempDir dir("rss");
  const int64_t rows = 4096, cols = 4096;  // 32 MiB of BF16
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.5f);
  write_checkpoint(dir.str(), {{"big", {rows, cols}, v.data(), Dtype::bf16}});
  v.clear();
  v.shrink_to_fit();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  SafetensorsCheckpoint ck(dir.str());
  long before = rss_file_kb();
  REQUIRE(before >= 0);
  ck.read<float>("big", {rows, cols}, out.data());
  long grown = rss_file_kb() - before;
  INFO("file-backed resident memory grew by " << grown << " kB while reading a 32768 kB tensor");
  CHECK(grown < 32768 / 4);
  CHECK(out[12345] == 0.5f);
}
