// The ranks of a model-parallel engine group (engine.h, Engine groups) and how they talk: over MPI,
// each rank of an mlpt_component_group puts its MPI world rank in the host's key-value store under
// "<group>/world_rank/<r>", and the ranks build a communicator of their own from those (the other
// processes of the run take no part). The group is one tensor_parallel × expert_parallel layout
// (model/parallel/model_parallel.hpp places group rank ep_rank · tp + tp_rank); rank 0 runs the
// scheduler and sends every other rank what to compute next (`send` / `receive`), the model's
// collectives run on the layout's tensor- and expert-parallel communicators.
//
// Every wait of a group's ranks for each other (the step messages, agreement, the model's
// collectives) gives up when one of them reports a failure (report_failure), so a rank that fails
// halfway through a step leaves none waiting: each throws an error naming it.
//
// A group of one needs nothing (no MPI). A larger group needs a process started by an MPI launcher
// whose host initialised MPI, and a plugin built with MPI (MLPT_REFERENCE_MPI).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/parallel/communicator.hpp"
#include "model/parallel/model_parallel.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::ref {

class GroupFailure;

// For tests only (engine settings test_only_fail_at_collective, test_only_fail_rank): with
// `at_collective` > 0, group rank `rank` (every rank when -1) throws instead of making its
// at_collective-th collective of the model.
struct EngineTestFault {
  int64_t at_collective = 0;
  int64_t rank = -1;
};

class EngineGroup {
 public:
  // `group` NULL or of one rank: a group of one, which must have tp = ep = 1. Otherwise its size
  // must be tp · ep. Throws MLPT_INVALID_ARGUMENT naming the mismatch, MLPT_FAILED_PRECONDITION
  // without MPI initialised, MLPT_UNIMPLEMENTED in a plugin built without MPI.
  // `fault`, for tests only: a rank that fails halfway through a step.
  // `etp`: expert tensor parallelism, 1 or tp (model_parallel.hpp).
  EngineGroup(const mlpt_component_group* group, int tp, int ep, int etp = 1, EngineTestFault fault = {});
  ~EngineGroup();
  EngineGroup(const EngineGroup&) = delete;
  EngineGroup& operator=(const EngineGroup&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const ModelShard& shard() const { return shard_; }
  const ModelParallel& model_parallel() const { return parallel_; }

  // Rank 0: hands `message` to every other rank (returns once it is on its way to all).
  void send(const std::vector<char>& message);
  // Another rank: the next message rank 0 sends. Waits without holding a core (polls with short
  // sleeps: a rank that serves an idle rank 0 costs nothing).
  std::vector<char> receive();
  // Collective over the group: every rank passes its reason to refuse (empty: none) and its code;
  // every rank gets the first refusing rank's, or nothing when no rank refused.
  struct Refusal {
    int rank;
    mlpt_error_code code;
    std::string reason;
  };
  std::optional<Refusal> first_refusal(mlpt_error_code code, const std::string& mine);

  // This rank failed where the others may be waiting for it (halfway through a step): tells them
  // why. The group is broken from then on (model/parallel/group_failure.hpp): send, receive,
  // first_refusal and the model's collectives throw MLPT_UNAVAILABLE naming the failed rank on
  // every rank, none waits for it. Only the first failure is reported; a group of one ignores it.
  void report_failure(const std::string& why);

 private:
  std::string name_;
  int rank_ = 0, size_ = 1;
  void* comm_ = nullptr;  // the group's MPI communicator (messages and agreement), when size_ > 1
  std::shared_ptr<GroupFailure> failure_;  // how its ranks hear of a failed one, when size_ > 1 (MPI only)
  ModelShard shard_;
  std::unique_ptr<Communicator> tensor_, expert_;  // the model's, when tp (ep) > 1
  std::unique_ptr<Communicator> routed_;           // the routed experts' group when etp = 1 and tp > 1
  ModelParallel parallel_;
};

}  // namespace mlpt::ref
