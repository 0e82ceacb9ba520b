// The trainer's side of the sparse refit: turns each exported version of the weights into the
// message the transport moves (refit_manifest.hpp): the weights themselves the first time, when
// forced, every `full_every` refits and whenever the tensor layout changes; otherwise only what
// changed since the previous version, per tensor in its smallest form (sparse_delta.hpp).
// What changed comes from the trainer's change list when it gives one for the last version sent
// (mlpt/sdk/changed_elements.hpp: then nothing is compared and the sender keeps no copy), else from
// comparing against a copy of the last version sent, which the sender keeps for that.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "mlpt/sdk/changed_elements.hpp"
#include "weight_copy.hpp"

namespace mlpt::sparse_refit {

// What one version cost: the run's metrics row shows it (mode "full" or "delta").
struct VersionStats {
  bool full = true;                // the weights themselves; else what changed since the last version
  bool whole_by_rates = false;     // full because the measured rates said it was quicker than a delta
  bool marked = false;             // a delta from the trainer's change list (`changed`: marked elements)
  uint64_t bytes = 0;              // of the message, manifest included
  uint64_t dense_bytes = 0;        // the weights' own size: what a dense refit moves
  int64_t numel = 0, changed = 0;  // elements as compared, and those that differ (delta only)
};

class RefitSender {
 public:
  // full_every 0: only the first and forced. check_lists: keep the copy and compare even when the
  // trainer gives change lists, and refuse a list that leaves a changed element unmarked (a
  // trainer's conformance check; it costs what a comparing refit costs).
  explicit RefitSender(int64_t full_every = 0, bool check_lists = false)
      : full_every_(full_every), check_lists_(check_lists) {}

  // The message for `version` of `weights` (compact host memory). Its views stay valid until the
  // next prepare; a full message points into `weights`, which must stay unchanged as long.
  // `changes`: the trainer's change list sent with them (nullptr: none); used when it counts from the
  // last version prepared, with the same layout, a mask for every tensor and element widths of 1,
  // 2, 4 or 8 bytes; otherwise the sender compares (or, holding no copy, sends the version whole).
  const std::vector<mlpt_named_tensor>& prepare(uint64_t version, const mlpt_named_tensor* weights,
                                                size_t count, bool force_full = false,
                                                const sdk::ChangedElementsExtension* changes = nullptr);
  const VersionStats& stats() const { return stats_; }
  // The last message prepare returned.
  const std::vector<mlpt_named_tensor>& message() const { return message_; }

  // What the last message cost on the wire, as the host measured it: `bytes` sent in `seconds`.
  // From these rates and the encoder's own, the sender sends a version whole when that is quicker
  // than finding, sending and applying its changes (a fast link, or a step that changed much).
  void observe_send(uint64_t bytes, double seconds);
  // The predicted seconds of the next version as a delta and whole (0, 0 until both rates are known).
  std::pair<double, double> predicted_seconds(uint64_t dense_bytes) const;

 private:
  bool list_fits(const sdk::ChangedElementsExtension* changes, const mlpt_named_tensor* weights,
                 size_t count) const;
  // check_lists: throws MLPT_FAILED_PRECONDITION naming the first changed element a list left
  // unmarked; the copy is left as it was.
  void check_list(const sdk::ChangedElementsExtension& changes, const mlpt_named_tensor* weights,
                  size_t count, uint64_t version);

  int64_t full_every_, since_full_ = 0;
  bool check_lists_;
  uint64_t prepared_ = 0;          // the version of the last message (0: none yet)
  bool trainer_lists_ = false;     // the trainer gave change lists: a full version keeps no copy
  double wire_bytes_per_s_ = 0;    // measured by the host, the latest send
  double encode_bytes_per_s_ = 0;  // dense bytes compared per second by the last delta (hashing included)
  double delta_fraction_ = 0;      // the last delta's bytes over the dense bytes
  WeightCopy base_;
  std::vector<std::byte> manifest_;
  std::vector<std::vector<std::byte>> blobs_;
  std::vector<int64_t> blob_sizes_;
  std::vector<mlpt_named_tensor> message_;
  VersionStats stats_;
};

}  // namespace mlpt::sparse_refit
