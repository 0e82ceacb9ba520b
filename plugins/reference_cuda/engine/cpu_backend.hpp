// The reference engine's CPU backend (engine/backend.hpp) and the component "qwen35_cpu": fp32
// weights in host memory, per sequence a SequenceCache (model/model.hpp), one step = forward_hidden
// over the packed segments, the LM head on the rows that sample, and the CPU sampler.
//
// Settings, besides the engine's (engine/engine.hpp): threads (per step, 1; while a train step
// runs in the process the engine gets the cores it leaves: backends/cpu/threads.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "engine/backend.hpp"
#include "engine/engine.hpp"
#include "model/model.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

class CpuEngineBackend final : public EngineBackend {
 public:
  CpuEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill);

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_state() override;
  void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) override;
  void step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out) override;

 private:
  ModelConfig config_;
  std::mutex mutex_;  // guards weights_ (a step holds its own reference)
  std::shared_ptr<const Weights<float>> weights_;
  int threads_ = 1;
  GdnMode prefill_mode_ = GdnMode::chunked;
};

// The component: the reference engine on this backend.
class CpuEngine final : public ReferenceEngine {
 public:
  explicit CpuEngine(std::string_view config_json);
};

}  // namespace mlpt::ref
