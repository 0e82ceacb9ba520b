#include "backends/cpu/activations.hpp"

namespace mlpt::ref::cpu {

template <class T>
void gdn_gates_forward(int64_t rows, int64_t Hv, const T* a, const T* b, const T* a_log, const T* dt_bias, T* g,
                       T* beta) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < Hv; ++h) {
      int64_t i = r * Hv + h;
      beta[i] = sigmoid(b[i]);
      g[i] = -std::exp(a_log[h]) * softplus(a[i] + dt_bias[h]);
    }
}

template <class T>
void gdn_gates_backward(int64_t rows, int64_t Hv, const T* a, const T* b, const T* a_log, const T* dt_bias,
                        const T* dg, const T* dbeta, T* da, T* db, T* d_a_log, T* d_dt_bias) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < Hv; ++h) {
      int64_t i = r * Hv + h;
      T beta = sigmoid(b[i]);
      db[i] = dbeta[i] * beta * (T(1) - beta);
      T s = a[i] + dt_bias[h];
      T A = std::exp(a_log[h]);
      T dsp = s > T(20) ? T(1) : sigmoid(s);  // d softplus / ds, matching the threshold
      T ds = dg[i] * (-A) * dsp;
      da[i] = ds;
      if (d_dt_bias) d_dt_bias[h] += ds;
      if (d_a_log) d_a_log[h] += dg[i] * (-A * softplus(s));  // dg/dA_log = g
    }
}

template <class T>
void sigmoid_gate_forward(int64_t rows, int64_t D, const T* o, int64_t o_stride, const T* gate, int64_t gate_stride,
                          T* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = o[r * o_stride + i] * sigmoid(gate[r * gate_stride + i]);
}

template <class T>
void sigmoid_gate_backward(int64_t rows, int64_t D, const T* o, int64_t o_stride, const T* gate,
                           int64_t gate_stride, const T* dy, T* d_o, int64_t d_o_stride, T* dgate,
                           int64_t dgate_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < D; ++i) {
      T s = sigmoid(gate[r * gate_stride + i]);
      T d = dy[r * D + i];
      dgate[r * dgate_stride + i] = d * o[r * o_stride + i] * s * (T(1) - s);
      d_o[r * d_o_stride + i] = d * s;
    }
}

template <class T>
void swiglu_forward(int64_t rows, int64_t I, const T* g, const T* u, int64_t gu_stride, T* h) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < I; ++i) h[r * I + i] = silu(g[r * gu_stride + i]) * u[r * gu_stride + i];
}

template <class T>
void swiglu_backward(int64_t rows, int64_t I, const T* g, const T* u, int64_t gu_stride, const T* dh, T* dg, T* du,
                     int64_t dgu_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < I; ++i) {
      T gv = g[r * gu_stride + i], uv = u[r * gu_stride + i], d = dh[r * I + i];
      dg[r * dgu_stride + i] = d * uv * silu_grad(gv);
      du[r * dgu_stride + i] = d * silu(gv);
    }
}

#define MLPT_INSTANTIATE(T)                                                                                 \
  template void gdn_gates_forward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, T*, T*);     \
  template void gdn_gates_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*,   \
                                      const T*, T*, T*, T*, T*);                                            \
  template void sigmoid_gate_forward<T>(int64_t, int64_t, const T*, int64_t, const T*, int64_t, T*);        \
  template void sigmoid_gate_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, int64_t, const T*,  \
                                         T*, int64_t, T*, int64_t);                                         \
  template void swiglu_forward<T>(int64_t, int64_t, const T*, const T*, int64_t, T*);                       \
  template void swiglu_backward<T>(int64_t, int64_t, const T*, const T*, int64_t, const T*, T*, T*, int64_t);
MLPT_INSTANTIATE(float)
MLPT_INSTANTIATE(double)
#undef MLPT_INSTANTIATE

}  // namespace mlpt::ref::cpu
