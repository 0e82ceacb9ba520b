#include "device_model/staged_experts.hpp"

#include <algorithm>
#include <vector>

#include "model/parallel/expert_dispatch.hpp"

namespace mlpt::ref::dev {

namespace {

template <class T>
std::vector<T> to_host(Ops& ops, const T* device, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) ops.to_host(host.data(), device, size_t(n) * sizeof(T));
  return host;
}

// bf16 rows as fp32 on the host (the precision the exchange carries).
std::vector<float> widened_to_host(Ops& ops, const bf16* device, int64_t n) {
  if (n == 0) return {};
  Buffer wide(ops, size_t(n) * 4);
  ops.to_float(n, device, wide.as<float>());
  return to_host(ops, wide.as<float>(), n);
}
// fp32 host rows into bf16 device memory (rounded once, by the backend).
void narrowed_to_device(Ops& ops, const float* host, int64_t n, bf16* device) {
  if (n == 0) return;
  Buffer wide(ops, size_t(n) * 4);
  ops.to_device(wide.get(), host, size_t(n) * 4);
  ops.to_bf16(n, wide.as<float>(), device);
  ops.synchronize();  // `wide` goes away at return
}

// The rows a rank received, in the backend's memory: x (bf16) and each row's local expert id.
struct ReceivedRows {
  Buffer x, ids;
  ReceivedRows(Ops& ops, int64_t n, int64_t H, const float* xs, const int16_t* local)
      : x(ops, size_t(std::max<int64_t>(n * H, 1)) * 2), ids(ops, size_t(std::max<int64_t>(n, 1)) * 2) {
    narrowed_to_device(ops, xs, n * H, x.as<bf16>());
    if (n) ops.to_device(ids.get(), local, size_t(n) * 2);
  }
};

// This rank's block of experts, computed by the ops (MoeShape of E/P experts, one per row).
LocalExperts local_experts(Ops& ops, const MoeShape& shape, int64_t per_rank, const bf16* gate_up,
                           const bf16* down, float* dgate_up, float* ddown) {
  const MoeShape one{shape.hidden, per_rank, 1, shape.intermediate, shape.norm_topk_prob};
  const int64_t H = shape.hidden;
  LocalExperts local;
  local.forward = [&ops, one, H, gate_up, down](int64_t n, const float* xs, const int16_t* ids, float* out) {
    const ReceivedRows rows(ops, n, H, xs, ids);
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    Buffer w(ops, size_t(std::max<int64_t>(n, 1)) * 4), y(ops, size_t(std::max<int64_t>(n * H, 1)) * 2);
    if (n) ops.to_device(w.get(), ones.data(), size_t(n) * 4);
    ops.zero(y.get(), size_t(n * H) * 2);
    ops.experts_forward(one, n, rows.x.as<bf16>(), rows.ids.as<int16_t>(), w.as<float>(), gate_up, down,
                        y.as<bf16>());
    const std::vector<float> e = widened_to_host(ops, y.as<bf16>(), n * H);
    std::copy(e.begin(), e.end(), out);
  };
  local.backward = [&ops, one, H, gate_up, down, dgate_up, ddown](
                       int64_t n, const float* xs, const float* dys, const float* ws, const int16_t* ids,
                       float* dxs, float* dws) {
    const ReceivedRows rows(ops, n, H, xs, ids);
    const size_t nh = size_t(std::max<int64_t>(n * H, 1)), nn = size_t(std::max<int64_t>(n, 1));
    Buffer dy(ops, nh * 2), w(ops, nn * 4), dx(ops, nh * 2), dw(ops, nn * 4);
    narrowed_to_device(ops, dys, n * H, dy.as<bf16>());
    if (n) ops.to_device(w.get(), ws, size_t(n) * 4);
    ops.experts_backward(one, n, rows.x.as<bf16>(), rows.ids.as<int16_t>(), w.as<float>(), gate_up, down,
                         dy.as<bf16>(), dx.as<bf16>(), false, dw.as<float>(), dgate_up, ddown);
    const std::vector<float> d = widened_to_host(ops, dx.as<bf16>(), n * H);
    std::copy(d.begin(), d.end(), dxs);
    const std::vector<float> dwh = to_host(ops, dw.as<float>(), n);
    std::copy(dwh.begin(), dwh.end(), dws);
  };
  return local;
}

}  // namespace

void staged_experts_forward(Ops& ops, Communicator& group, Communicator* sharers, const MoeShape& shape,
                            int64_t rows, const bf16* x, const int16_t* experts, const float* weights,
                            const bf16* gate_up, const bf16* down, bf16* y) {
  if (rows == 0 && sharers == &group) return;  // every rank has the same rows: none of them exchanges
  const int64_t H = shape.hidden, k = shape.top_k;
  const std::vector<float> xh = widened_to_host(ops, x, rows * H);
  const std::vector<int16_t> eh = to_host(ops, experts, rows * k);
  const std::vector<float> wh = to_host(ops, weights, rows * k);
  std::vector<float> yh(static_cast<size_t>(rows * H), 0.0f);
  const LocalExperts local =
      local_experts(ops, shape, shape.num_experts / group.size(), gate_up, down, nullptr, nullptr);
  dispatch_experts_forward(group, sharers, shape, rows, xh.data(), eh.data(), wh.data(), local, yh.data());
  if (rows == 0) return;  // this rank only computed its experts for the others
  Buffer combined(ops, size_t(rows * H) * 2);
  narrowed_to_device(ops, yh.data(), rows * H, combined.as<bf16>());
  ops.add_inplace(rows * H, combined.as<bf16>(), y);
  ops.synchronize();  // `combined` goes away at return
}

void staged_experts_backward(Ops& ops, Communicator& group, Communicator* sharers, const MoeShape& shape,
                             int64_t rows, const bf16* x, const int16_t* experts, const float* weights,
                             const bf16* gate_up, const bf16* down, const bf16* dy, bf16* dx, float* dweights,
                             float* dgate_up, float* ddown) {
  if (rows == 0 && sharers == &group) return;
  const int64_t H = shape.hidden, k = shape.top_k;
  const std::vector<float> xh = widened_to_host(ops, x, rows * H);
  const std::vector<float> dyh = widened_to_host(ops, dy, rows * H);
  const std::vector<int16_t> eh = to_host(ops, experts, rows * k);
  const std::vector<float> wh = to_host(ops, weights, rows * k);
  std::vector<float> dxh(static_cast<size_t>(rows * H), 0.0f), dwh(static_cast<size_t>(rows * k), 0.0f);
  const LocalExperts local =
      local_experts(ops, shape, shape.num_experts / group.size(), gate_up, down, dgate_up, ddown);
  dispatch_experts_backward(group, sharers, shape, rows, xh.data(), eh.data(), wh.data(), dyh.data(), local,
                            dxh.data(), dwh.data());
  if (rows == 0) return;
  Buffer combined(ops, size_t(rows * H) * 2);
  narrowed_to_device(ops, dxh.data(), rows * H, combined.as<bf16>());
  ops.add_inplace(rows * H, combined.as<bf16>(), dx);
  ops.to_device(dweights, dwh.data(), size_t(rows * k) * 4);
  ops.synchronize();
}

}  // namespace mlpt::ref::dev
