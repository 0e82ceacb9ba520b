// Expert parallelism for the routed experts of one MoE layer: the ranks that hold the same rows
// (`sharers`: the whole expert group when every rank has the same tokens; under expert data
// parallelism, MoE parallel folding, only the tensor-parallel group, each expert-parallel rank
// with tokens of its own) split those rows into contiguous slices; each rank sends every (token,
// expert) pair of its slice to the rank of `group` that owns the expert (all-to-all, as many pairs
// per rank as its rows route there), computes the experts it owns for what it received, returns
// the outputs (all-to-all back), sums each token's weighted outputs in expert order (the order
// cpu::experts_forward sums them on one rank), and the sharers gather their slices so each ends
// with every one of its rows. Routing happens before, on every sharer alike, so replayed experts
// (R3) travel the same way as chosen ones. The backward makes the same round trip with the
// gradients. Every rank of `group` takes part in each call, one with no rows too (it still
// computes its experts for the others).
//
// The exchange works on host memory; what computes a rank's experts on the rows it received is a
// callback (LocalExperts), so a backend whose experts live elsewhere (the CUDA model's, on its GPU)
// reuses the same exchange and combine.
#pragma once

#include <cstdint>
#include <functional>

#include "backends/cpu/moe.hpp"
#include "model/parallel/communicator.hpp"

namespace mlpt::ref {

// This rank's experts on the n rows it received, each a row of x [n, H] (host) with its local
// expert id in [0, E/P) (local[n]).
struct LocalExperts {
  // out [n, H] (zeros on entry) = E_local(x) (weight 1: the sender weighs).
  std::function<void(int64_t n, const float* x, const int16_t* local, float* out)> forward;
  // Given dy [n, H] and each row's routing weight w [n]: dx [n, H] (zeros on entry) = w · dE/dx · dy,
  // dweights [n] = <dy, E(x)>; this rank's experts' weight gradients accumulate where the callback
  // keeps them.
  std::function<void(int64_t n, const float* x, const float* dy, const float* w, const int16_t* local, float* dx,
                     float* dweights)>
      backward;
};

// y[rows, H] += Σ_i w_i · E_i(x) over the routed experts of `shape` (E split evenly over `group`),
// with `local` computing this rank's experts. x, experts and weights (host) are the same on every
// rank of `sharers` (a group of ranks of `group`: `&group` when all of them hold the same rows;
// NULL or a group of one: this rank's rows are its own); so is y afterwards.
void dispatch_experts_forward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                              int64_t rows, const float* x, const int16_t* experts, const float* weights,
                              const LocalExperts& local, float* y);
// Its backward: given dy [rows, H] (the same on every sharer), dx [rows, H] += the experts' input
// gradient and dweights [rows, k] is overwritten, on every sharer alike.
void dispatch_experts_backward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                               int64_t rows, const float* x, const int16_t* experts, const float* weights,
                               const float* dy, const LocalExperts& local, float* dx, float* dweights);

// y[rows, H] += Σ_i w_i · E_i(x) over the routed experts, like cpu::experts_forward, with this
// rank holding experts [rank · E/P, (rank + 1) · E/P) of `shape.num_experts` (gate_up
// [E/P, 2I, H], down [E/P, H, I]; I this rank's FFN width). x, experts and weights are the same
// on every rank of `sharers` (as dispatch_experts_forward); so is y afterwards. Float32 only (the
// communicators carry floats).
template <class T>
void dispatched_experts_forward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                                int64_t rows, const T* x, const int16_t* experts, const T* weights,
                                const T* gate_up, const T* down, T* y);

// The backward of dispatched_experts_forward, like cpu::experts_backward: given dy [rows, H] (the
// same on every sharer), dx [rows, H] += the experts' input gradient and dweights [rows, k] is
// overwritten, on every sharer alike; this rank's experts' weight gradients accumulate into
// dgate_up / ddown (its blocks; NULL skips them).
template <class T>
void dispatched_experts_backward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                                 int64_t rows, const T* x, const int16_t* experts, const T* weights,
                                 const T* gate_up, const T* down, const T* dy, T* dx, T* dweights,
                                 T* dgate_up, T* ddown);

}  // namespace mlpt::ref
