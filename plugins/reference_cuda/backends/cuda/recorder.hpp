// The ops' WorkRecorder on a CUDA stream: CUDA graph capture of the stream's work (thread-local
// mode: this thread may not call what would synchronise while it records), instantiated once and
// replayed with cudaGraphLaunch. A recording bakes in every pointer and launch size; the device
// model stages what changes per step in fixed buffers first (device_model/decode_graphs.hpp).
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/context.hpp"
#include "device_model/backend_options.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref::cuda {

class CudaRecorder final : public WorkRecorder {
 public:
  // `scratch`: the ops' own scratch buffers, whose addresses recordings bake in.
  CudaRecorder(const Context& ctx, std::vector<const DeviceBuffer*> scratch);
  void begin_recording() override;
  std::unique_ptr<RecordedWork> end_recording() override;
  // Sets the context's expert products to the device-sized forms while on (restored when off).
  void set_recordable(bool on) override;
  std::vector<const void*> scratch_addresses() const override;

 private:
  const Context& ctx_;
  std::vector<const DeviceBuffer*> scratch_;
  bool recordable_ = false;
  ExpertGemm experts_before_ = ExpertGemm::grouped;
};

}  // namespace mlpt::ref::cuda
