// The seam between the reference engine's scheduler (engine.cpp: requests, continuous batching,
// sessions, prefix cache, pause and weight versions) and the hardware that runs the model: a
// backend owns the weights and the per-sequence generation state and runs one step over a packed
// batch. The CPU backend (engine/cpu_backend.cpp, fp32) and the device backend
// (engine/device_backend.cpp, bf16 on any device platform: qwen35_cuda, qwen35_bf16) implement it;
// the scheduler is one.
//
// A backend may be one rank of an engine group (engine.h, Engine groups; both backends with
// tensor_parallel / expert_parallel): rank 0's backend runs
// every step on all ranks (it tells the others what to compute), the others only serve() it. Both
// backends implement the group functions through one protocol (engine/group_backend.hpp); the
// defaults here are those of an engine alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlpt/engine.h"
#include "mlpt/sdk/reshard.hpp"
#include "model/config.hpp"
#include "model/sampling.hpp"

namespace mlpt::ref {

// One sequence's generation state (§4: GDN state, conv windows, attention keys and values), in
// whatever memory the backend keeps it. Destroyed on any thread.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual size_t bytes() const = 0;                          // memory held, for the session budgets
  virtual std::unique_ptr<SequenceState> clone() const = 0;  // an independent copy (prefix cache)
};

// One segment of a step: `tokens` continue `state`; with `sample`, a token is drawn after the last
// one from its logits with these parameters and the counter-based draw at `counter` (the absolute
// position of the new token: model/sampling.hpp).
struct StepSegment {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  const SamplingParams* sample = nullptr;
  uint64_t counter = 0;
};

struct StepOutput {
  std::vector<SampledToken> sampled;  // one per segment with `sample`, in segment order
  std::vector<int16_t> routing;       // [tokens, moe layers, k] when asked for, else empty
};

class EngineBackend {
 public:
  virtual ~EngineBackend() = default;
  virtual const ModelConfig& config() const = 0;
  // A fresh state (no tokens consumed).
  virtual std::unique_ptr<SequenceState> new_state() = 0;
  // Replaces the weights by named tensors from the transport (mlpt_load_weights_args; which
  // devices' memory a backend accepts is its own). All or nothing: throws, weights unchanged.
  // Called only between steps (the engine is paused). `ready`: when the tensors' device data may be
  // read (mlpt.h, Device memory; zeroed: at the call); host memory ignores it.
  virtual void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) = 0;
  // Runs the segments (states advance by their tokens), samples over ids [0, valid), and records
  // routing when `record_routing`. Throws on failure; states may then be half-advanced (the
  // engine fails the step's requests).
  virtual void step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing,
                    StepOutput& out) = 0;

  // ---- Engine groups ----
  // The end of the engine's create: `refusal` is this rank's reason to fail it (empty: none; `code`
  // its error code). Throws it (in a group: on every rank, the first refusing rank's) or returns.
  virtual void created(mlpt_error_code code, const std::string& refusal) {
    if (!refusal.empty()) throw sdk::Error(code, refusal);
  }
  virtual int group_rank() const { return 0; }
  virtual int group_size() const { return 1; }
  // The layout of the weights this rank takes (sdk::Engine::weight_layout); count 0: whole tensors.
  virtual sdk::TensorLayout weight_layout() { return {}; }
  // A load every rank of the group takes part in (engine.h, Engine groups), `args` as the host gave
  // them (NULL: this rank has no tensors to load) and `refusal` this rank's reason to refuse it
  // (empty: none; `code` its error code). Loads on every rank or throws on every rank, naming the
  // first rank that refused; the weights are unchanged then. Called by a group of several ranks only.
  virtual void load_in_group(const mlpt_load_weights_args* args, mlpt_error_code code, const std::string& refusal) {
    (void)args, (void)code, (void)refusal;
  }
  // A rank other than 0: computes what rank 0's backend sends (steps, loads) until rank 0's backend
  // is destroyed, then returns. Runs on a thread of the engine's.
  virtual void serve() {}
};

}  // namespace mlpt::ref
