// What one refit moved, for the metrics rows and the report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mlpt/mlpt.h"

namespace mlpt::refit {

struct RefitStats {
  std::string mode;                // "dense" (the weights as exported), "full" or "delta" (sparse mode)
  uint64_t bytes = 0;              // handed to the transport for this version, manifest included
  uint64_t dense_bytes = 0;        // the weights' own size: what a dense refit moves
  int64_t numel = 0, changed = 0;  // elements, and those that differ from the previous version (delta only;
                                   // marked ones from a change list)
  bool whole_by_rates = false;     // sent full because the measured rates said it was quicker than a delta
  bool from_change_list = false;   // a delta of the elements the trainer marked as changed (nothing compared)
  std::string fallback;  // why the refit asked for ([run] refit = "sparse") was not used; empty when it was
};

// What a dense refit of `weights` moves: the weights as they are.
RefitStats dense_stats(const mlpt_named_tensor* weights, size_t count);

}  // namespace mlpt::refit
