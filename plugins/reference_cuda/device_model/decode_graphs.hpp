// Decode steps recorded once per batch bucket and replayed (CUDA graphs on the GPU: the backend's
// WorkRecorder, ops/ops.hpp): the engine's one-token steps without a launch per op and without a
// host round trip inside the step (docs/gpu-backend.md, "Decode graphs").
//
// A step of S sequences, one token each, runs in the smallest bucket B ≥ S (graph_buckets.hpp):
// padded with B − S rows of a pad sequence of this runner's own (its GDN state, conv window and one
// KV block, reset before every step, so the real rows never read it), staged into the bucket's own
// workspace (forward_staged: tokens, positions, block table at a fixed width, KV lengths, every
// layer's state and window pointers, sampling parameters), then the bucket's recording replays: the
// forward, the LM head over the B rows and sampling, all on the device. The first step of a bucket,
// and the first after its recording became invalid (graph_buckets.hpp: weights reallocated, scratch
// moved, a wider table), runs the same work unrecorded (which sizes the workspace) and records it.
// The routed experts take their device-sized forms in every step here (WorkRecorder::
// set_recordable), recorded or not. On a backend without a recorder every step runs unrecorded:
// the same staging and padding, which is how the CPU tests check them. A recording the backend
// refuses leaves its bucket unrecorded until its key changes (stats().failed and the reason).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_model/generate.hpp"
#include "device_model/graph_buckets.hpp"

namespace mlpt::ref::dev {

// The ops take their recordable forms (WorkRecorder::set_recordable) while it lives; nothing on a
// backend without a recorder. Steps compared with recorded ones run under it.
class RecordableForms {
 public:
  explicit RecordableForms(Ops& ops) : r_(ops.recorder()) {
    if (r_) r_->set_recordable(true);
  }
  ~RecordableForms() {
    if (r_) r_->set_recordable(false);
  }
  RecordableForms(const RecordableForms&) = delete;
  RecordableForms& operator=(const RecordableForms&) = delete;

 private:
  WorkRecorder* r_;
};

class DecodeGraphs {
 public:
  // Buckets up to `max_batch` sequences (at most kAllExpertsMaxRows: larger batches' experts are
  // sized on the host). Takes one KV block from `pool` for the pad sequence.
  DecodeGraphs(Ops& ops, const ModelConfig& c, KvBlockPool& pool, int64_t max_batch);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Why `batch` cannot run here ("" when it can): every segment one token with its state, no
  // replayed routing, one rank, at most the largest bucket.
  std::string refusal(const DeviceBatch& batch) const;
  // generate_step for a batch refusal() accepts, with the same results as generate_step under
  // the device-sized expert forms: bit for bit where the bucket is full, and each real row as it
  // would be in a full batch where it is not. Synchronous; states advance.
  StepResult step(const DeviceWeights& w, const DeviceBatch& batch, const SampleRows& rows, int64_t valid);

  const std::vector<int64_t>& buckets() const { return buckets_; }
  struct Stats {
    int64_t recorded = 0;     // recordings made (a bucket's first, and each after an invalidation)
    int64_t replayed = 0;     // steps run by replaying a recording
    int64_t unrecorded = 0;   // steps run without one (recording steps, or no recorder)
    int64_t invalidated = 0;  // recordings dropped because their key changed
    int64_t failed = 0;       // recordings the backend refused (the bucket then runs unrecorded)
    std::string failure;      // the last refusal's reason
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Bucket;
  Bucket& bucket_for(int64_t size);
  RecordingKey key_for(const DeviceWeights& w, const KvCache& kv, int64_t width, int64_t valid) const;
  void queue_head(const DeviceWeights& w, Bucket& b, int64_t valid);
  // The bucket's work for `padded` recorded (not run); throws what the recorder refused.
  std::unique_ptr<RecordedWork> record(const DeviceWeights& w, const DeviceBatch& padded, Bucket& b,
                                       int64_t valid, const std::function<void()>& reset_pad);

  Ops& ops_;
  KvBlockPool& pool_;
  std::vector<int64_t> buckets_;
  std::vector<std::unique_ptr<Bucket>> by_size_;
  DeviceSequenceState pad_;
  Stats stats_;
};

}  // namespace mlpt::ref::dev
