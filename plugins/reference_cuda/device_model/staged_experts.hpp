// Expert parallelism of the device model, by host-staged dispatch: a layer's routed rows and
// routing are copied to the host, exchanged over the expert group by the CPU-tested
// model/parallel/expert_dispatch.hpp (the same exchange and combine model/model.cpp uses), this
// rank's experts run through the ops on the rows it received, and the combined rows come back.
// The same round trip carries the backward. (Device all-to-all is issue-tracked future work.)
//
// `group` is a host-memory communicator (MPI) of the expert-parallel ranks; the ranks of `sharers`
// (expert_dispatch.hpp: `&group` when every rank has the same rows, under MoE parallel folding the
// tensor-parallel group's host communicator or NULL) call with the same x, experts and weights
// (routing is computed alike on each of them) and end with the same y. This rank holds experts
// [rank · E/P, (rank + 1) · E/P): gate_up [E/P, 2I, H], down [E/P, H, I] of `shape` (E the whole
// model's count, I this rank's FFN width). Synchronous; a rank with no rows of its own still takes
// part when its rows are its own (it computes its experts for the others).
#pragma once

#include "model/parallel/communicator.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref::dev {

// y[rows, H] += Σ_i w_i · E_i(x), as Ops::experts_forward, with the experts split over `group`.
void staged_experts_forward(Ops& ops, Communicator& group, Communicator* sharers, const MoeShape& shape,
                            int64_t rows, const bf16* x, const int16_t* experts, const float* weights,
                            const bf16* gate_up, const bf16* down, bf16* y);

// Its backward, as Ops::experts_backward with accumulate_dx: dx [rows, H] += the experts' input
// gradient, dweights [rows, k] fp32 overwritten (the same on every rank); this rank's experts'
// gradients accumulate into dgate_up / ddown (fp32, its block).
void staged_experts_backward(Ops& ops, Communicator& group, Communicator* sharers, const MoeShape& shape,
                             int64_t rows, const bf16* x, const int16_t* experts, const float* weights,
                             const bf16* gate_up, const bf16* down, const bf16* dy, bf16* dx, float* dweights,
                             float* dgate_up, float* ddown);

}  // namespace mlpt::ref::dev
