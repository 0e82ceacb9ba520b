#include "backends/cuda/components/cuda_platform.hpp"

#include "backends/cuda/parallel/device_communicator.hpp"

namespace mlpt::ref::cuda {

CudaPlatform::CudaPlatform(int device, const BackendOptions& options, const char* component)
    : device_(device), options_(with_environment(options)) {
  check_combination(options_, component);
  select_device(device_, component);
  ctx_ = create_context(options_);
  ops_ = std::make_unique<CudaOps>(ctx_);
}

CudaPlatform::~CudaPlatform() {
  ops_.reset();
  destroy_context(ctx_);
}

void CudaPlatform::bind_thread() {
  check(cudaSetDevice(device_), "cudaSetDevice");
}

std::unique_ptr<Communicator> CudaPlatform::device_group(Communicator& host_group, std::string& kind) {
  DeviceCommunicator d = device_communicator(host_group, ctx_.stream);
  kind = d.kind;
  return std::move(d.group);
}

void CudaPlatform::wait_for(const mlpt_device_ready& ready) {
  if (ready.kind == MLPT_READY_AFTER_EVENT && ready.event)
    check(cudaStreamWaitEvent(ctx_.stream, static_cast<cudaEvent_t>(ready.event), 0),
          "load_weights: wait for the producer's event");
}

bool CudaPlatform::copy_device_tensor(const DLTensor& t, size_t bytes, void* dst) {
  if (t.device.device_type != kDLCUDA) return false;
  // cudaMemcpyDefault: the pointer's own device (unified addressing), so any GPU works.
  const char* src = static_cast<const char*>(t.data) + t.byte_offset;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx_.stream), "load_weights");
  return true;
}

}  // namespace mlpt::ref::cuda
