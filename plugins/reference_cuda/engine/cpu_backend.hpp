// The reference engine's CPU backend (engine/backend.hpp) and the component "qwen35_cpu": fp32
// weights in host memory, per sequence a SequenceCache (model/model.hpp), one step = forward_hidden
// over the packed segments, the LM head on the rows that sample, and the CPU sampler.
//
// Settings, besides the engine's (engine/engine.hpp): threads (per step, 1; while a train step
// runs in the process the engine gets the cores it leaves: backends/cpu/threads.hpp);
// tensor_parallel, expert_parallel (1, 1): the engine is one rank of an engine group (engine.h,
// Engine groups) of tensor_parallel × expert_parallel ranks, a model-parallel layout of one model
// (model/parallel/model_parallel.hpp places group rank ep_rank · tp + tp_rank);
// test_only_fail_at_collective (0: never) and test_only_fail_rank (-1: every rank), for tests of a
// failing rank only: that group rank throws instead of making its n-th collective of the model,
// halfway through a step.
//
// A rank whose step fails (rank 0's forward, another rank's part of it) tells the others why and
// the group is broken (engine/engine_group.hpp, report_failure): none waits for it in the step's
// collectives; every rank's later steps and loads fail with MLPT_UNAVAILABLE naming the rank that
// failed, and the other ranks stop serving.
//
// In a group each rank loads only its shard of the checkpoint (load_shard_weights) and keeps its
// part of every sequence's cache (its attention and GDN heads); rank 0 runs the scheduler and, for
// every step, sends the others the step's segments and the cache copies and drops since the last
// (engine/group_message.hpp); all ranks run the sharded forward together (tensor- and expert-
// parallel collectives over MPI) and rank 0 alone applies the LM head and samples (the hidden
// states are the same on every rank). Tokens, logprobs and routed experts are therefore those of
// one rank with the same weights up to the sharded forward's rounding: bit for bit under expert
// parallelism alone, float32 sums in another order under tensor parallelism. A group rank's
// weight_shards are its shard boxes (model/parallel/shard_boxes.hpp); load_weights takes exactly
// those, or whole tensors (then sliced here).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/backend.hpp"
#include "engine/engine.hpp"
#include "engine/engine_group.hpp"
#include "engine/group_message.hpp"
#include "model/model.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

class StateLedger;

class CpuEngineBackend final : public EngineBackend {
 public:
  CpuEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill,
                   const mlpt_component_group* group);
  ~CpuEngineBackend() override;  // rank 0 of a group: the other ranks stop serving

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_state() override;
  void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) override;
  void step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out) override;

  void created(mlpt_error_code code, const std::string& refusal) override;
  int group_rank() const override { return group_->rank(); }
  int group_size() const override { return group_->size(); }
  sdk::TensorLayout weight_layout() override;
  void load_in_group(const mlpt_load_weights_args* args, mlpt_error_code code, const std::string& refusal) override;
  void serve() override;

 private:
  // A host's load on a rank other than 0, waiting for the serving thread to take part in rank 0's.
  struct HostLoad {
    const mlpt_load_weights_args* args = nullptr;
    mlpt_error_code code = MLPT_OK;
    std::string refusal;
    bool done = false;
    std::optional<sdk::Error> failed;
  };
  void describe_shards();
  Weights<float> import_update(const mlpt_load_weights_args& args) const;
  void load_together(uint64_t version, const mlpt_load_weights_args* args, mlpt_error_code code, std::string refusal);
  void serve_step(const GroupMessage& m);
  void serve_load(uint64_t version);
  std::shared_ptr<const Weights<float>> current_weights();

  ModelConfig config_;        // the whole model's
  ModelConfig shard_config_;  // this rank's part (config_ for an engine alone)
  std::unique_ptr<EngineGroup> group_;
  std::mutex mutex_;  // guards weights_ (a step holds its own reference)
  std::shared_ptr<const Weights<float>> weights_;
  int threads_ = 1;
  GdnMode prefill_mode_ = GdnMode::chunked;

  // ---- a rank of a group of several ----
  std::shared_ptr<StateLedger> ledger_;  // rank 0: the states' ids, copies and drops not yet sent
  std::mutex channel_;                   // rank 0: one step or load at a time on the group
  std::map<uint64_t, std::unique_ptr<SequenceCache<float>>> caches_;  // other ranks: rank 0's states
  std::mutex host_load_mutex_;
  std::condition_variable host_load_changed_;
  HostLoad* host_load_ = nullptr;  // other ranks: the host's load, until the serving thread takes it
  bool host_loading_ = false;      // other ranks: a host's load is in progress
  std::optional<std::string> stopped_serving_;  // other ranks: why serve() returned
  ModelLayout shard_layout_;  // this rank's tensors (their names are weight_shards')
  // weight_shards: the shard boxes, each a tensor (data NULL) with its place in the global tensor.
  struct Box {
    size_t tensor;
    ShardBox box;
    std::vector<int64_t> global_shape;
  };
  std::vector<Box> boxes_;
  std::vector<mlpt_named_tensor> box_tensors_;
  std::vector<mlpt_tensor_shard> box_shards_;
};

// The component: the reference engine on this backend.
class CpuEngine final : public ReferenceEngine {
 public:
  explicit CpuEngine(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref
