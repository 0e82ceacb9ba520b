// The engine's side of the sparse refit: rebuilds each version of the weights from the message the
// transport delivered (refit_manifest.hpp) into a copy it keeps, and checks every rebuilt tensor
// against the sender's checksum (a delta from the trainer's change list: every delta as sent, before
// it is applied). A delta against another version than the one held is
// MLPT_FAILED_PRECONDITION, a malformed message or a rebuilt tensor that differs from the
// sender's is MLPT_DATA_LOSS; after either the copy is dropped, so only a full message is
// accepted next: the engine never runs on weights that silently diverged (from a change list: as
// long as the trainer keeps its promise to mark every change).
#pragma once

#include <cstdint>
#include <vector>

#include "weight_copy.hpp"

namespace mlpt::sparse_refit {

class RefitReceiver {
 public:
  // The weights of `version` rebuilt from `message`; the views stay valid until the next apply.
  const std::vector<mlpt_named_tensor>& apply(uint64_t version, const mlpt_named_tensor* message,
                                              size_t count);
  // The version now held (0: none).
  uint64_t version() const { return copy_.valid() ? copy_.version() : 0; }

 private:
  void rebuild(uint64_t version, const mlpt_named_tensor* message, size_t count);
  WeightCopy copy_;
};

}  // namespace mlpt::sparse_refit
