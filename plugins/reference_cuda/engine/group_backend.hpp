// The engine-group protocol (engine.h, Engine groups) once for every backend: a backend derived
// from GroupBackend may be one rank of a tensor_parallel × expert_parallel group (engine/
// engine_group.hpp) and implements only what one rank computes on its shard (the hooks below).
//
// Rank 0 runs the scheduler. Its sequence states carry ids, and with every step or load it sends
// the other ranks (engine/group_message.hpp) the copies and drops since the last, then the step's
// segments or the load's version; the other ranks serve() them on their own part of each state
// (kept under rank 0's id). All ranks run the sharded forward together; rank 0 alone samples.
// Loads are all or none: every rank prepares its new shard, the ranks agree (first_refusal), then
// all swap or none does. A rank whose forward fails tells the others (report_failure): none waits
// for it, and the group is broken (every later step and load fails naming it on every rank, the
// other ranks stop serving).
//
// Settings read here: tensor_parallel, expert_parallel (1, 1): the group's layout, and
// expert_tensor_parallel (1: whole experts over the group, or tensor_parallel);
// test_only_fail_at_collective (0: never) and test_only_fail_rank (-1: every rank), for tests of a
// failing rank only: that group rank throws instead of making its n-th collective of the model,
// halfway through a step.
//
// In a group each rank loads only its shard of the checkpoint; its weight_shards are its shard
// boxes (model/parallel/shard_boxes.hpp), and a load takes exactly those or whole tensors (sliced
// here), in host memory.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/engine_group.hpp"
#include "engine/group_message.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/weights.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

class StateLedger;

class GroupBackend : public EngineBackend {
 public:
  ~GroupBackend() override;  // rank 0 of a group: the other ranks stop serving

  std::unique_ptr<SequenceState> new_state() final;
  void step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out) final;
  void created(mlpt_error_code code, const std::string& refusal) final;
  int group_rank() const final { return group_->rank(); }
  int group_size() const final { return group_->size(); }
  sdk::TensorLayout weight_layout() final;
  void load_in_group(const mlpt_load_weights_args* args, mlpt_error_code code, const std::string& refusal) final;
  void serve() final;

 protected:
  // Reads the group's settings; the backend then reads its own, calls reject_unknown and join().
  explicit GroupBackend(sdk::Settings& settings);
  // The ranks of `group` meet (collective; NULL or one rank: an engine alone).
  void join(const mlpt_component_group* group);
  int tensor_parallel() const { return tp_; }
  int expert_parallel() const { return ep_; }
  bool grouped() const { return group_->size() > 1; }  // one rank of a group of several
  EngineGroup& group() { return *group_; }
  // Every rank readies itself (`prepare`: its device, its shard of `checkpoint`). In a group a rank
  // whose `prepare` throws fails the create on every rank, naming it (none waits for it); alone its
  // error is the create's.
  void prepare_together(const std::string& checkpoint, const std::function<void()>& prepare);
  // In a group, within prepare: the shard this rank loaded of the model `whole` (weight_layout's
  // boxes, what loads take).
  void describe_shard(const ModelConfig& whole, const Weights<float>& shard);

  // ---- what a backend computes on its shard ----
  // Runs the forward with the group's collectives: on rank 0 of a group it first sends the step to
  // the other ranks, and a failure inside tells them. run_step calls it once, after anything that
  // may refuse the step on this rank alone.
  using GroupForward = std::function<void(const std::function<void()>& forward)>;
  // A fresh state of this rank's part of a sequence (no tokens consumed).
  virtual std::unique_ptr<SequenceState> new_shard_state() = 0;
  // EngineBackend::step on this rank's states, the forward inside `together`. Other ranks of a
  // group run rank 0's steps with no segment sampling and no routing recorded.
  virtual void run_step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out,
                        const GroupForward& together) = 0;
  // Makes `weights` (this rank's part, host fp32) the backend's own but not yet in use, and returns
  // the swap that puts them in use (it cannot fail). Throws when it cannot (weights unchanged).
  virtual std::function<void()> prepare_weights(Weights<float> weights) = 0;

 private:
  // A host's load on a rank other than 0, waiting for the serving thread to take part in rank 0's.
  struct HostLoad {
    const mlpt_load_weights_args* args = nullptr;
    mlpt_error_code code = MLPT_OK;
    std::string refusal;
    bool done = false;
    std::optional<sdk::Error> failed;
  };
  Weights<float> import_update(const mlpt_load_weights_args& args) const;
  void load_together(uint64_t version, const mlpt_load_weights_args* args, mlpt_error_code code, std::string refusal);
  void serve_step(const GroupMessage& m);
  void serve_load(uint64_t version);

  int tp_ = 1, ep_ = 1, etp_ = 1;  // settings tensor_parallel, expert_parallel, expert_tensor_parallel
  EngineTestFault fault_;
  std::unique_ptr<EngineGroup> group_;
  ModelConfig whole_config_, shard_config_;  // in a group

  // ---- a rank of a group of several ----
  std::shared_ptr<StateLedger> ledger_;  // rank 0: the states' ids, copies and drops not yet sent
  std::mutex channel_;                   // rank 0: one step or load at a time on the group
  std::map<uint64_t, std::unique_ptr<SequenceState>> states_;  // other ranks: rank 0's states
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

}  // namespace mlpt::ref
