// The [placement] table of a run config: how the processes of a multi-process run divide into the
// coordinator, the trainer group and rollout workers (core/dist/placement.hpp turns it into ranks).
// Read with the rest of the run config, so it lives here, below dist/.
#pragma once

#include <cstdint>

namespace mlpt::run {

struct PlacementSettings {
  int64_t trainer_ranks = 1;        // processes in the trainer group
  double answer_timeout_s = 1800;   // how long the coordinator waits for a rank's answer
  double heartbeat_timeout_s = 60;  // a rank silent this long (it sends a heartbeat every second) is gone
  int64_t engine_ranks = 1;         // processes per rollout worker: the ranks of its engine group
};

}  // namespace mlpt::run
