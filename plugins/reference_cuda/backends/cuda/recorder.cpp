#include "backends/cuda/recorder.hpp"

#include "backends/cuda/cudnn_attention.hpp"
#include "backends/cuda/gemm.hpp"

namespace mlpt::ref::cuda {

namespace {

class CudaGraph final : public RecordedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay() override { check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch (decode graph)"); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

CudaRecorder::CudaRecorder(const Context& ctx, std::vector<const DeviceBuffer*> scratch)
    : ctx_(ctx), scratch_(std::move(scratch)) {}

void CudaRecorder::begin_recording() {
  check(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

std::unique_ptr<RecordedWork> CudaRecorder::end_recording() {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(ctx_.stream, &graph);
  if (ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported here, not left for the next call
    check(ended,
          "cudaStreamEndCapture: the step's work could not be recorded (an op synchronised, "
          "allocated or copied to or from pageable host memory while recording)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(exec, ctx_.stream);
}

void CudaRecorder::set_recordable(bool on) {
  if (on == recordable_) return;
  GemmEngine& engine = gemm_engine(ctx_);
  BackendOptions o = engine.options();
  if (on) {
    experts_before_ = o.experts;
    o.experts = ExpertGemm::device_sized;
  } else {
    o.experts = experts_before_;
  }
  engine.set_options(o);
  recordable_ = on;
}

std::vector<const void*> CudaRecorder::scratch_addresses() const {
  std::vector<const void*> out;
  for (const DeviceBuffer* b : scratch_) out.push_back(b->get());
  for (const void* p : gemm_engine(ctx_).scratch_addresses()) out.push_back(p);
  if (ctx_.attention)  // cuda_attention = "cudnn"
    for (const void* p : ctx_.attention->scratch_addresses()) out.push_back(p);
  return out;
}

}  // namespace mlpt::ref::cuda
