// Refit time at scale, as a model (not a measurement): how long moving the trainer's new BF16
// weights into every engine replica takes, dense or sparse, from the config's real tensor list,
// the two parallel layouts and stated link bandwidths. Each engine GPU receives its own shard once
// over the network (engine replicas relay to each other, so the trainer's egress does not
// multiply by the replica count), the trainer-layout slices are regrouped into the engine layout
// inside the node over NVLink, and the update is applied in HBM. The three stages are summed, not
// overlapped, so the estimate is an upper bound for that data path.
#pragma once

#include <string>

#include "model/memory_plan.hpp"

namespace mlpt::ref {

struct RefitLinks {
  double network_bytes_per_s = 800e9 / 8;  // per GPU: one 800 Gb/s InfiniBand/Ethernet NIC per GB300
  double nvlink_bytes_per_s = 900e9;       // per GPU per direction (NVLink 5: 1.8 TB/s both ways)
  double hbm_bytes_per_s = 8e12;           // per GPU (GB300 HBM3e)
};

struct RefitTime {
  double model_bytes = 0;           // the text model in BF16
  double engine_shard_bytes = 0;    // one engine GPU's share
  double wire_fraction = 1;         // wire bytes / dense bytes (1 for dense)
  double network_s = 0, nvlink_s = 0, apply_s = 0;
  double total_s() const { return network_s + nvlink_s + apply_s; }
};

// Bytes per element of a sparse update in which `changed_fraction` of the BF16 elements differ,
// spread evenly: the smallest of indices (LEB128 gaps + values), bitmap + values, or dense (2).
double sparse_bytes_per_element(double changed_fraction);

// changed_fraction < 0 means dense.
RefitTime refit_time(const ModelConfig& config, const PlanRequest& placement, const RefitLinks& links,
                     double changed_fraction);
std::string format_refit(const ModelConfig& config, const PlanRequest& placement, const RefitLinks& links,
                         double changed_fraction);

}  // namespace mlpt::ref
