// save_trainer_state writes each tensor piece by piece (StateRanks::piece_bytes): whole experts of
// a fused routed-expert tensor, blocks of rows of a matrix. Whatever the piece, the files are the
// same bytes, the model directory is what the whole-tensor writer (save_checkpoint_as) writes, the
// state loads back exactly, and what a save holds at once is one piece, not the fused tensor.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "model_fixtures.hpp"
#include "tests/support/test_util.hpp"
#include "trainer/trainer_state.hpp"

using namespace mlpt::ref;
using mlpt_test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kExperts = 32;

// A published-style source for `w`: layer 0's routed experts fused, gate_up in FP8 (8 x 8 blocks,
// per expert) and down in BF16; layer 1's one tensor per expert; in_proj_qkv FP8 (a matrix of 16
// rows: two blocks of rows); the rest BF16; and an mtp.* tensor the model does not use.
void write_source(const std::string& dir, const Weights<float>& w) {
  const ModelConfig& c = w.config;
  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  const std::pair<int64_t, int64_t> block{8, 8};
  std::vector<TensorToWrite> out;
  std::vector<std::unique_ptr<Fp8Tensor>> fp8;
  auto add_fp8 = [&](const std::string& name, const std::vector<int64_t>& shape, const float* v) {
    fp8.push_back(std::make_unique<Fp8Tensor>(quantize_fp8(v, shape, block)));
    out.push_back({name, shape, nullptr, Dtype::f8_e4m3, fp8.back()->values.data()});
    out.push_back({scale_inv_name(name), fp8.back()->scale_shape, fp8.back()->scale_inv.data(), Dtype::f32});
  };
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    const float* v = w.values[i].data();
    const bool layer0 = spec.name.find("layers.0.") != std::string::npos, layer1 = spec.name.find("layers.1.") != std::string::npos;
    const std::string base = spec.name.substr(0, spec.name.rfind('.') + 1);
    if (layer0 && spec.name.find("experts.gate_up_proj") != std::string::npos) {
      add_fp8(spec.name, spec.shape, v);
    } else if (layer1 && spec.name.find("experts.gate_up_proj") != std::string::npos) {
      for (int64_t e = 0; e < c.num_experts; ++e) {
        out.push_back({base + std::to_string(e) + ".gate_proj.weight", {I, H}, v + e * 2 * I * H, Dtype::bf16});
        out.push_back({base + std::to_string(e) + ".up_proj.weight", {I, H}, v + e * 2 * I * H + I * H, Dtype::bf16});
      }
    } else if (layer1 && spec.name.find("experts.down_proj") != std::string::npos) {
      for (int64_t e = 0; e < c.num_experts; ++e)
        out.push_back({base + std::to_string(e) + ".down_proj.weight", {H, I}, v + e * H * I, Dtype::bf16});
    } else if (spec.name.find("in_proj_qkv") != std::string::npos) {
      add_fp8(spec.name, spec.shape, v);
    } else {
      out.push_back({spec.name, spec.shape, v, Dtype::bf16});
    }
  }
  const std::vector<float> mtp(static_cast<size_t>(I * H), 0.375f);
  out.push_back({"mtp.layers.0.mlp.experts.0.gate_proj.weight", {I, H}, mtp.data(), Dtype::bf16});
  write_checkpoint(dir, out, 6000);  // several shards and an index
  json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["num_experts"] = kExperts;
  cfg["text_config"]["dtype"] = "bfloat16";
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {8, 8}}};
  write_file_atomic(dir + "/config.json", cfg.dump());
}

// Every file under `dir`, relative to it.
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), dir).string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("a save writes each tensor piece by piece: the same bytes whatever the piece, one piece held at a time") {
  TempDir dir("trainer_state_pieces");
  json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["num_experts"] = kExperts;
  const ModelConfig c = parse_model_config(cfg, "micro config, 32 experts");
  const Weights<float> w = init_weights<float>(c, 7), m = init_weights<float>(c, 8);
  Weights<float> v = init_weights<float>(c, 9);
  for (auto& t : v.values)
    for (float& x : t) x = x * x;  // a second moment is not negative
  write_source(dir / "src", w);

  const int64_t H = c.hidden_size, I = c.moe_intermediate;
  const size_t fused_bytes = static_cast<size_t>(kExperts * 2 * I * H) * sizeof(float);  // one quantity of gate_up, fp32
  const size_t expert_bytes = static_cast<size_t>(2 * I * H) * sizeof(float);
  struct Save {
    const char* name;
    size_t piece_bytes;
    SaveFootprint footprint;
  };
  // Whole tensors at once (what every save did before: a fused expert tensor gathered whole), one
  // expert of gate_up at a time, and the least a piece can be (one expert, one row of a matrix,
  // eight of an FP8 one: in_proj_qkv's blocks in two pieces).
  std::vector<Save> saves = {{"whole", size_t{1} << 40, {}}, {"expert", expert_bytes, {}}, {"least", 1, {}}};
  for (Save& s : saves) {
    StateRanks ranks = StateRanks::one(c);
    ranks.piece_bytes = s.piece_bytes;
    s.footprint = save_trainer_state(dir / s.name, dir / "src", w, m, v, 3, 3, ranks);
  }

  const std::vector<std::string> files = files_under(dir / "whole");
  REQUIRE(files.size() >= 6);  // model and optimizer files, their indexes, config, trainer_state.json
  for (const Save& s : saves) {
    INFO(s.name);
    REQUIRE(files_under(dir / s.name) == files);
    for (const std::string& f : files) {
      INFO(f);
      CHECK(mlpt_test::read_bytes(dir / s.name + "/" + f) == mlpt_test::read_bytes(dir / "whole/" + f));
    }
    CHECK(s.footprint.bytes_written == saves[0].footprint.bytes_written);
  }

  // The model directory holds what the whole-tensor writer encodes, tensor by tensor (FP8 scales
  // per block, experts one tensor each where the source has them, the mtp.* tensor byte for byte).
  save_checkpoint_as(dir / "as", w, SafetensorsCheckpoint(dir / "src"));
  const SafetensorsCheckpoint pieces(dir / "least"), whole_writer(dir / "as");
  REQUIRE(pieces.names() == whole_writer.names());
  for (const std::string& name : pieces.names()) {
    INFO(name);
    CHECK(pieces.read_raw(name).bytes == whole_writer.read_raw(name).bytes);
  }
  // The state loads back exactly: master weights and both moments.
  const TrainerState loaded = load_trainer_state(dir / "least", w);
  CHECK(loaded.weights.values == w.values);
  CHECK(loaded.m.values == m.values);
  CHECK(loaded.v.values == v.values);

  // Held at once: the whole fused tensor before; one piece (its gather's buffers and its encoding) now.
  CHECK(saves[0].footprint.largest_piece_bytes >= fused_bytes);
  CHECK(saves[1].footprint.largest_piece_bytes <= 4 * expert_bytes);
  CHECK(saves[1].footprint.largest_piece_bytes < fused_bytes);
  CHECK(saves[2].footprint.largest_piece_bytes <= 4 * expert_bytes);
  WARN("largest piece held by a save of " << kExperts << " experts (gate_up " << fused_bytes << " B in fp32): whole tensors "
                                          << saves[0].footprint.largest_piece_bytes << " B, one expert at a time "
                                          << saves[1].footprint.largest_piece_bytes << " B, the least piece "
                                          << saves[2].footprint.largest_piece_bytes << " B; " << saves[0].footprint.bytes_written
                                          << " B written by each");
}
