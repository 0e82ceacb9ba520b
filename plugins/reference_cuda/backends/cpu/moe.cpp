#include "backends/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/activations.hpp"
#include "backends/cpu/linear.hpp"

namespace mlpt::ref::cpu {

template <class T>
bool route(const MoeShape& s, int64_t rows, const T* logits, const int16_t* replay, int16_t* experts, T* weights) {
  const int64_t E = s.num_experts, k = s.top_k;
  std::vector<int> order(static_cast<size_t>(E));
  for (int64_t r = 0; r < rows; ++r) {
    const T* l = logits + r * E;
    int16_t* ex = experts + r * k;
    if (replay) {
      for (int64_t i = 0; i < k; ++i) {
        int16_t e = replay[r * k + i];
        if (e < 0 || e >= E) return false;
        ex[i] = e;
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      for (int64_t i = 0; i < k; ++i) ex[i] = static_cast<int16_t>(order[i]);
    }
    T mx = l[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    T* w = weights + r * k;
    T sel = 0;
    for (int64_t i = 0; i < k; ++i) sel += (w[i] = std::exp(l[ex[i]] - mx));
    T denom = sel;
    if (!s.norm_topk_prob) {
      denom = 0;
      for (int64_t e = 0; e < E; ++e) denom += std::exp(l[e] - mx);
    }
    for (int64_t i = 0; i < k; ++i) w[i] /= denom;
  }
  return true;
}

template <class T>
void route_backward(const MoeShape& s, int64_t rows, const T* logits, const int16_t* experts, const T* weights,
                    const T* dweights, T* dlogits) {
  const int64_t E = s.num_experts, k = s.top_k;
  for (int64_t r = 0; r < rows; ++r) {
    T* dl = dlogits + r * E;
    const T* w = weights + r * k;
    const T* dw = dweights + r * k;
    const int16_t* ex = experts + r * k;
    std::fill(dl, dl + E, T(0));
    T dot = 0;
    for (int64_t i = 0; i < k; ++i) dot += w[i] * dw[i];
    if (s.norm_topk_prob) {  // w = softmax over the selected set: dl_i = w_i (dw_i − Σ w_j dw_j)
      for (int64_t i = 0; i < k; ++i) dl[ex[i]] += w[i] * (dw[i] - dot);
    } else {  // w_i = p_i of the full softmax: dl = p ⊙ (dp − p·dp), dp nonzero on the selected set
      const T* l = logits + r * E;
      T mx = l[0];
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
      T z = 0;
      for (int64_t e = 0; e < E; ++e) z += std::exp(l[e] - mx);
      for (int64_t e = 0; e < E; ++e) dl[e] = -std::exp(l[e] - mx) / z * dot;
      for (int64_t i = 0; i < k; ++i) dl[ex[i]] += w[i] * dw[i];
    }
  }
}

namespace {
// Tokens routed to each expert: (row, slot) pairs grouped by expert.
struct Assignment {
  std::vector<int64_t> start;  // E + 1
  std::vector<int64_t> row, slot;
};
Assignment assign(int64_t E, int64_t k, int64_t rows, const int16_t* experts) {
  Assignment a;
  a.start.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < rows * k; ++i) a.start[experts[i] + 1]++;
  for (int64_t e = 0; e < E; ++e) a.start[e + 1] += a.start[e];
  std::vector<int64_t> fill(a.start.begin(), a.start.end() - 1);
  a.row.resize(static_cast<size_t>(rows * k));
  a.slot.resize(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      int64_t at = fill[experts[r * k + i]]++;
      a.row[at] = r;
      a.slot[at] = i;
    }
  return a;
}
}  // namespace

template <class T>
void experts_forward(const MoeShape& s, int64_t rows, const T* x, const int16_t* experts, const T* weights,
                     const T* gate_up, const T* down, T* y) {
  const int64_t H = s.hidden, I = s.intermediate, k = s.top_k;
  Assignment a = assign(s.num_experts, k, rows, experts);
  std::vector<T> xe, gu, h, out;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t n = a.start[e + 1] - a.start[e];
    if (n == 0) continue;
    xe.resize(static_cast<size_t>(n * H));
    for (int64_t j = 0; j < n; ++j) std::copy(x + a.row[a.start[e] + j] * H, x + (a.row[a.start[e] + j] + 1) * H, xe.begin() + j * H);
    gu.resize(static_cast<size_t>(n * 2 * I));
    h.resize(static_cast<size_t>(n * I));
    out.resize(static_cast<size_t>(n * H));
    linear_forward(n, 2 * I, H, xe.data(), gate_up + e * 2 * I * H, gu.data());
    swiglu_forward(n, I, gu.data(), gu.data() + I, 2 * I, h.data());
    linear_forward(n, H, I, h.data(), down + e * H * I, out.data());
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = a.row[a.start[e] + j];
      T w = weights[r * k + a.slot[a.start[e] + j]];
      for (int64_t c = 0; c < H; ++c) y[r * H + c] += w * out[j * H + c];
    }
  }
}

template <class T>
void experts_backward(const MoeShape& s, int64_t rows, const T* x, const int16_t* experts, const T* weights,
                      const T* gate_up, const T* down, const T* dy, T* dx, T* dweights, T* dgate_up, T* ddown) {
  const int64_t H = s.hidden, I = s.intermediate, k = s.top_k;
  Assignment a = assign(s.num_experts, k, rows, experts);
  std::vector<T> xe, gu, h, out, dye, dh, dgu, dxe;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t n = a.start[e + 1] - a.start[e];
    if (n == 0) continue;
    xe.resize(static_cast<size_t>(n * H));
    dye.resize(static_cast<size_t>(n * H));
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = a.row[a.start[e] + j];
      std::copy(x + r * H, x + (r + 1) * H, xe.begin() + j * H);
    }
    gu.resize(static_cast<size_t>(n * 2 * I));
    h.resize(static_cast<size_t>(n * I));
    out.resize(static_cast<size_t>(n * H));
    linear_forward(n, 2 * I, H, xe.data(), gate_up + e * 2 * I * H, gu.data());
    swiglu_forward(n, I, gu.data(), gu.data() + I, 2 * I, h.data());
    linear_forward(n, H, I, h.data(), down + e * H * I, out.data());
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = a.row[a.start[e] + j], slot = a.slot[a.start[e] + j];
      T w = weights[r * k + slot], d = 0;
      for (int64_t c = 0; c < H; ++c) {
        d += dy[r * H + c] * out[j * H + c];
        dye[j * H + c] = w * dy[r * H + c];
      }
      dweights[r * k + slot] = d;
    }
    dh.resize(static_cast<size_t>(n * I));
    linear_backward_input(n, H, I, dye.data(), down + e * H * I, dh.data(), false);
    if (ddown) linear_backward_weight(n, H, I, dye.data(), h.data(), ddown + e * H * I);
    dgu.resize(static_cast<size_t>(n * 2 * I));
    swiglu_backward(n, I, gu.data(), gu.data() + I, 2 * I, dh.data(), dgu.data(), dgu.data() + I, 2 * I);
    dxe.resize(static_cast<size_t>(n * H));
    linear_backward_input(n, 2 * I, H, dgu.data(), gate_up + e * 2 * I * H, dxe.data(), false);
    if (dgate_up) linear_backward_weight(n, 2 * I, H, dgu.data(), xe.data(), dgate_up + e * 2 * I * H);
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = a.row[a.start[e] + j];
      for (int64_t c = 0; c < H; ++c) dx[r * H + c] += dxe[j * H + c];
    }
  }
}

#define MLPT_INSTANTIATE(T)                                                                                    \
  template bool route<T>(const MoeShape&, int64_t, const T*, const int16_t*, int16_t*, T*);                    \
  template void route_backward<T>(const MoeShape&, int64_t, const T*, const int16_t*, const T*, const T*, T*); \
  template void experts_forward<T>(const MoeShape&, int64_t, const T*, const int16_t*, const T*, const T*,     \
                                   const T*, T*);                                                              \
  template void experts_backward<T>(const MoeShape&, int64_t, const T*, const int16_t*, const T*, const T*,    \
                                    const T*, const T*, T*, T*, T*, T*);
MLPT_INSTANTIATE(float)
MLPT_INSTANTIATE(double)
#undef MLPT_INSTANTIATE

}  // namespace mlpt::ref::cpu
