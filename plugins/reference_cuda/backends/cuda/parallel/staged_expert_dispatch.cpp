#include "backends/cuda/parallel/staged_expert_dispatch.hpp"

#include <algorithm>
#include <vector>

#include "model/parallel/expert_dispatch.hpp"

namespace mlpt::ref::cuda {

namespace {

template <class T>
std::vector<T> to_host(const Context& ctx, const T* device, int64_t n, const char* what) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) check(cudaMemcpyAsync(host.data(), device, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, ctx.stream), what);
  check(cudaStreamSynchronize(ctx.stream), what);
  return host;
}
template <class T>
void to_device(const Context& ctx, T* device, const T* host, int64_t n, const char* what) {
  if (n > 0) check(cudaMemcpyAsync(device, host, size_t(n) * sizeof(T), cudaMemcpyHostToDevice, ctx.stream), what);
  check(cudaStreamSynchronize(ctx.stream), what);  // the host buffer may go away after return
}

// bf16 rows on the device as fp32 on the host (the precision the exchange carries).
std::vector<float> widened_to_host(const Context& ctx, const bf16* device, int64_t n, const char* what) {
  if (n == 0) return {};
  DeviceBuffer wide(size_t(std::max<int64_t>(n, 1)) * 4);
  to_float(ctx, n, device, wide.as<float>());
  return to_host(ctx, wide.as<float>(), n, what);
}
// fp32 host rows into a bf16 device buffer (rounded once, on the device).
void narrowed_to_device(const Context& ctx, const float* host, int64_t n, bf16* device, const char* what) {
  if (n == 0) return;
  DeviceBuffer wide(size_t(std::max<int64_t>(n, 1)) * 4);
  to_device(ctx, wide.as<float>(), host, n, what);
  to_bf16(ctx, n, wide.as<float>(), device);
}

// The rows a rank received, on the device: x (bf16) and each row's local expert id.
struct ReceivedRows {
  DeviceBuffer x, ids;
  ReceivedRows(const Context& ctx, int64_t n, int64_t H, const float* xs, const int16_t* local)
      : x(size_t(n * H) * 2), ids(size_t(n) * 2) {
    narrowed_to_device(ctx, xs, n * H, x.as<bf16>(), "expert dispatch: received rows");
    to_device(ctx, ids.as<int16_t>(), local, n, "expert dispatch: received expert ids");
  }
};

// This rank's block of experts, computed on the device (MoeShape of E/P experts, one per row).
LocalExperts device_local_experts(const Context& ctx, const MoeShape& shape, int64_t per_rank, const bf16* gate_up,
                                  const bf16* down, float* dgate_up, float* ddown, DeviceBuffer& scratch) {
  const MoeShape one{shape.hidden, per_rank, 1, shape.intermediate, shape.norm_topk_prob};
  const int64_t H = shape.hidden;
  LocalExperts local;
  local.forward = [&ctx, one, H, gate_up, down, &scratch](int64_t n, const float* xs, const int16_t* ids, float* out) {
    const ReceivedRows rows(ctx, n, H, xs, ids);
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    DeviceBuffer w(size_t(n) * 4), y(size_t(n * H) * 2);
    to_device(ctx, w.as<float>(), ones.data(), n, "expert dispatch: weights");
    check(cudaMemsetAsync(y.get(), 0, y.bytes(), ctx.stream), "expert dispatch: zero");
    experts_forward(ctx, one, n, rows.x.as<bf16>(), rows.ids.as<int16_t>(), w.as<float>(), gate_up, down, y.as<bf16>(),
                    scratch);
    const std::vector<float> e = widened_to_host(ctx, y.as<bf16>(), n * H, "expert dispatch: expert outputs");
    std::copy(e.begin(), e.end(), out);
  };
  local.backward = [&ctx, one, H, gate_up, down, dgate_up, ddown, &scratch](int64_t n, const float* xs, const float* dys,
                                                                           const float* ws, const int16_t* ids,
                                                                           float* dxs, float* dws) {
    const ReceivedRows rows(ctx, n, H, xs, ids);
    DeviceBuffer dy(size_t(n * H) * 2), w(size_t(n) * 4), dx(size_t(n * H) * 2), dw(size_t(n) * 4);
    narrowed_to_device(ctx, dys, n * H, dy.as<bf16>(), "expert dispatch: received gradients");
    to_device(ctx, w.as<float>(), ws, n, "expert dispatch: weights");
    experts_backward(ctx, one, n, rows.x.as<bf16>(), rows.ids.as<int16_t>(), w.as<float>(), gate_up, down,
                     dy.as<bf16>(), dx.as<bf16>(), false, dw.as<float>(), dgate_up, ddown, scratch);
    const std::vector<float> d = widened_to_host(ctx, dx.as<bf16>(), n * H, "expert dispatch: input gradients");
    std::copy(d.begin(), d.end(), dxs);
    const std::vector<float> dwh = to_host(ctx, dw.as<float>(), n, "expert dispatch: weight gradients");
    std::copy(dwh.begin(), dwh.end(), dws);
  };
  return local;
}

}  // namespace

void staged_experts_forward(const Context& ctx, Communicator& group, const MoeShape& shape, int64_t rows,
                            const bf16* x, const int16_t* experts, const float* weights, const bf16* gate_up,
                            const bf16* down, bf16* y, DeviceBuffer& scratch) {
  if (rows == 0) return;  // every rank has the same rows: none of them exchanges
  const int64_t H = shape.hidden, k = shape.top_k;
  const std::vector<float> xh = widened_to_host(ctx, x, rows * H, "expert dispatch: rows");
  const std::vector<int16_t> eh = to_host(ctx, experts, rows * k, "expert dispatch: experts");
  const std::vector<float> wh = to_host(ctx, weights, rows * k, "expert dispatch: routing weights");
  std::vector<float> yh(static_cast<size_t>(rows * H), 0.0f);
  const LocalExperts local =
      device_local_experts(ctx, shape, shape.num_experts / group.size(), gate_up, down, nullptr, nullptr, scratch);
  dispatch_experts_forward(group, shape, rows, xh.data(), eh.data(), wh.data(), local, yh.data());
  DeviceBuffer combined(size_t(std::max<int64_t>(rows * H, 1)) * 2);
  narrowed_to_device(ctx, yh.data(), rows * H, combined.as<bf16>(), "expert dispatch: combined rows");
  add_inplace(ctx, rows * H, combined.as<bf16>(), y);
  check(cudaStreamSynchronize(ctx.stream), "expert dispatch: forward");
}

void staged_experts_backward(const Context& ctx, Communicator& group, const MoeShape& shape, int64_t rows,
                             const bf16* x, const int16_t* experts, const float* weights, const bf16* gate_up,
                             const bf16* down, const bf16* dy, bf16* dx, float* dweights, float* dgate_up,
                             float* ddown, DeviceBuffer& scratch) {
  if (rows == 0) return;
  const int64_t H = shape.hidden, k = shape.top_k;
  const std::vector<float> xh = widened_to_host(ctx, x, rows * H, "expert dispatch: rows");
  const std::vector<float> dyh = widened_to_host(ctx, dy, rows * H, "expert dispatch: gradients");
  const std::vector<int16_t> eh = to_host(ctx, experts, rows * k, "expert dispatch: experts");
  const std::vector<float> wh = to_host(ctx, weights, rows * k, "expert dispatch: routing weights");
  std::vector<float> dxh(static_cast<size_t>(rows * H), 0.0f), dwh(static_cast<size_t>(rows * k), 0.0f);
  const LocalExperts local =
      device_local_experts(ctx, shape, shape.num_experts / group.size(), gate_up, down, dgate_up, ddown, scratch);
  dispatch_experts_backward(group, shape, rows, xh.data(), eh.data(), wh.data(), dyh.data(), local, dxh.data(),
                            dwh.data());
  DeviceBuffer combined(size_t(std::max<int64_t>(rows * H, 1)) * 2);
  narrowed_to_device(ctx, dxh.data(), rows * H, combined.as<bf16>(), "expert dispatch: input gradients");
  add_inplace(ctx, rows * H, combined.as<bf16>(), dx);
  to_device(ctx, dweights, dwh.data(), rows * k, "expert dispatch: routing weight gradients");
}

}  // namespace mlpt::ref::cuda
