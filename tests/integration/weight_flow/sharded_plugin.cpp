// A test plugin with a trainer and an engine that hold shards in two different layouts, so that the
// weights' way plugin to plugin can be checked bit for bit against the dense tensors:
//   trainer "rows"     rank r of a group of n holds rows [r·6/n, (r+1)·6/n) of "w" [6, 9] and a whole
//                      replica of "norm" [9]; element values are weight_value(name, index, version);
//                      train_step makes the next version.
//   engine "columns"   rank e of {"ranks": m} holds columns [e·9/m, (e+1)·9/m) of "w" and the same
//                      elements of "norm"; load_weights checks it was given exactly its shards and
//                      writes their bytes to {"dump_dir"}/<rank>/<name>.bin.
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/settings.hpp>

#include <filesystem>
#include <fstream>

#include "weight_values.hpp"

namespace {

using mlpt::sdk::Error;

struct Part {
  std::string name;
  std::vector<int64_t> shape, global, offsets;
  std::vector<float> values;
};

void fill(Part& p, uint64_t version) {
  p.values.resize(static_cast<size_t>(p.shape.size() == 2 ? p.shape[0] * p.shape[1] : p.shape[0]));
  for (size_t i = 0; i < p.values.size(); ++i) {
    size_t global = static_cast<size_t>(p.offsets[0]) + i;  // 1-D
    if (p.shape.size() == 2) {
      const size_t row = i / static_cast<size_t>(p.shape[1]), col = i % static_cast<size_t>(p.shape[1]);
      global = (static_cast<size_t>(p.offsets[0]) + row) * static_cast<size_t>(p.global[1]) + static_cast<size_t>(p.offsets[1]) + col;
    }
    p.values[i] = weight_flow_test::weight_value(p.name, global, version);
  }
}

// The views the ABI takes of `parts`.
struct Views {
  std::vector<mlpt_named_tensor> tensors;
  std::vector<mlpt_tensor_shard> shards;
  void of(std::vector<Part>& parts, bool with_data) {
    tensors.clear(), shards.clear();
    for (auto& p : parts) {
      mlpt_named_tensor t{};
      t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      t.name = mlpt::sdk::borrow(p.name);
      t.tensor.data = with_data ? p.values.data() : nullptr;
      t.tensor.device = {kDLCPU, 0};
      t.tensor.ndim = static_cast<int32_t>(p.shape.size());
      t.tensor.dtype = mlpt::sdk::kFloat32;
      t.tensor.shape = p.shape.data();
      tensors.push_back(t);
      shards.push_back({MLPT_TENSOR_SHARD_STRUCT_SIZE, p.global.data(), p.offsets.data()});
    }
  }
};

class RowsTrainer final : public mlpt::sdk::Trainer {
 public:
  RowsTrainer(std::string_view config, const mlpt_component_group* group) {
    mlpt::sdk::Settings s(config, "trainer rows");
    version_ = static_cast<uint64_t>(s.integer_or("version", 1, 1));
    s.reject_unknown();
    const int64_t rank = group ? group->rank : 0, ranks = group ? group->size : 1;
    if (6 % ranks) throw Error(MLPT_INVALID_ARGUMENT, "rows: 6 rows do not split over " + std::to_string(ranks) + " ranks");
    const int64_t rows = 6 / ranks;
    parts_.push_back(Part{"w", {rows, 9}, {6, 9}, {rank * rows, 0}, std::vector<float>(static_cast<size_t>(rows * 9))});
    parts_.push_back(Part{"norm", {9}, {9}, {0}, std::vector<float>(9)});
    refill();
  }
  void train_step(mlpt_train_step_args& a) override {
    ++version_;
    refill();
    a.out_metrics = nullptr, a.out_num_metrics = 0, a.out_weight_version = version_;
  }
  void compute_logprobs(mlpt_compute_logprobs_args&) override { throw Error(MLPT_UNIMPLEMENTED, "rows: no model"); }
  void export_weights(mlpt_export_weights_args& a) override {
    a.out_tensors = views_.tensors.data();
    a.out_num_tensors = views_.tensors.size();
    a.out_weight_version = version_;
    if (mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_export_weights_args, out_shards))) a.out_shards = views_.shards.data();
  }
  void save_state(std::string_view) override { throw Error(MLPT_UNIMPLEMENTED, "rows: no state"); }
  void load_state(std::string_view) override { throw Error(MLPT_UNIMPLEMENTED, "rows: no state"); }

 private:
  void refill() {
    for (auto& p : parts_) fill(p, version_);
    views_.of(parts_, true);
  }
  uint64_t version_ = 1;
  std::vector<Part> parts_;
  Views views_;
};

class ColumnsEngine final : public mlpt::sdk::Engine {
 public:
  explicit ColumnsEngine(std::string_view config) {
    mlpt::sdk::Settings s(config, "engine columns");
    rank_ = s.integer_or("rank", 0, 0);
    const int64_t ranks = s.integer_or("ranks", 1, 1);
    dump_dir_ = s.string_or("dump_dir", "");
    s.reject_unknown();
    if (9 % ranks) throw Error(MLPT_INVALID_ARGUMENT, "columns: 9 columns do not split over " + std::to_string(ranks) + " ranks");
    const int64_t cols = 9 / ranks;
    parts_.push_back(Part{"w", {6, cols}, {6, 9}, {0, rank_ * cols}, {}});
    parts_.push_back(Part{"norm", {cols}, {9}, {rank_ * cols}, {}});
    layout_.of(parts_, false);
  }
  void model_info(mlpt_engine_model_info& info) override {
    info.vocab_size = 1, info.num_moe_layers = 0, info.experts_per_token = 0, info.max_sequence_length = 1;
    info.weight_version = version_;
  }
  void submit(std::shared_ptr<mlpt::sdk::GenerationRequest>) override { throw Error(MLPT_UNIMPLEMENTED, "columns: no model"); }
  void cancel(uint64_t) override {}
  void session_release(uint64_t) override {}
  void pause() override {}
  void resume() override {}
  mlpt::sdk::TensorLayout weight_layout() override { return {layout_.tensors.data(), layout_.shards.data(), layout_.tensors.size()}; }
  void load_weights(const mlpt_load_weights_args& a) override {
    const mlpt_tensor_shard* shards = mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_load_weights_args, shards)) ? a.shards : nullptr;
    if (a.num_tensors != parts_.size() || !shards) throw Error(MLPT_INVALID_ARGUMENT, "columns: not given exactly my shards");
    for (size_t i = 0; i < parts_.size(); ++i) {
      const auto& t = a.tensors[i];
      const Part& p = parts_[i];
      if (mlpt::sdk::to_string(t.name) != p.name || std::vector<int64_t>(t.tensor.shape, t.tensor.shape + t.tensor.ndim) != p.shape ||
          std::vector<int64_t>(shards[i].offsets, shards[i].offsets + t.tensor.ndim) != p.offsets)
        throw Error(MLPT_INVALID_ARGUMENT, "columns: tensor " + std::to_string(i) + " is not the shard of '" + p.name + "' I hold");
    }
    const auto dir = std::filesystem::path(dump_dir_) / std::to_string(rank_);
    std::filesystem::create_directories(dir);
    for (size_t i = 0; i < parts_.size(); ++i) {
      std::ofstream out(dir / (parts_[i].name + ".bin"), std::ios::binary | std::ios::trunc);
      out.write(static_cast<const char*>(a.tensors[i].tensor.data), static_cast<std::streamsize>(mlpt::sdk::nbytes(a.tensors[i].tensor)));
    }
    version_ = a.version;
  }

 private:
  int64_t rank_ = 0;
  std::string dump_dir_;
  std::vector<Part> parts_;
  Views layout_;
  uint64_t version_ = 0;
};

const mlpt_trainer_capabilities kTrainerCaps = {MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE, 0, 0, kDLCPU};
const mlpt_engine_capabilities kEngineCaps = {MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE, 0, 0, 0, 0, 0};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-test-sharded", "0.1.0",
                mlpt::sdk::trainer_component<RowsTrainer>("rows", "holds row shards of a [6, 9] tensor", &kTrainerCaps),
                mlpt::sdk::engine_component<ColumnsEngine>("columns", "holds column shards of a [6, 9] tensor", &kEngineCaps))
