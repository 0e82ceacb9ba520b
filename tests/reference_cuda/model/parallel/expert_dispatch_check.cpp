// An MPI program (mpirun -np 4: TP=2 x EP=2, whole experts over the four ranks) that checks the
// expert dispatch under MoE parallel folding (model/parallel/expert_dispatch.hpp): the two TP pairs
// hold different rows (7 and 3 tokens), each pair slices its rows between its ranks, and every
// rank's (token, expert) pairs go to the owners over all four ranks. Each rank compares with
// cpu::experts_forward / experts_backward over all experts on its own rows, on one rank: the
// outputs, input gradients and routing-weight gradients (whole rows travel, each token's experts
// summed in the one-rank order; only the kernels' blocking over another number of rows rounds
// apart) and the expert weight gradients, summed over both pairs' rows in another order. World
// rank 0 prints one JSON line; every rank exits 1 past the bounds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backends/cpu/moe.hpp"
#include "model/parallel/expert_dispatch.hpp"
#include "model/parallel/mpi_communicator.hpp"

using namespace mlpt::ref;

namespace {

std::vector<float> values(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = scale * static_cast<float>(static_cast<double>(x >> 40) / double(1 << 24) - 0.5);
  }
  return v;
}

// One pair's rows: x [n, H], each token's k distinct experts and weights.
struct Rows {
  int64_t n;
  std::vector<float> x, weights, dy;
  std::vector<int16_t> experts;
};
Rows rows_of(int pair, int64_t n, const cpu::MoeShape& s) {
  Rows r{n,
         values(static_cast<size_t>(n * s.hidden), 11 + pair, 2.0f),
         values(static_cast<size_t>(n * s.top_k), 23 + pair, 1.0f),
         values(static_cast<size_t>(n * s.hidden), 31 + pair, 1.0f),
         {}};
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < s.top_k; ++i)
      r.experts.push_back(static_cast<int16_t>((t * 3 + pair + i * 5) % s.num_experts));  // distinct: 5 < E
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

int check() {
  MpiModelLayout layout(2, 2);  // whole experts over the routed group of all four ranks
  const ModelParallel& groups = layout.groups();
  const ModelShard& shard = layout.shard();
  Communicator& routed = *groups.routed_group();
  const cpu::MoeShape shape{6, 8, 2, 4, true};
  const int64_t H = shape.hidden, I = shape.intermediate, E = shape.num_experts;
  const int P = routed.size();
  const int64_t per = E / P;
  const std::vector<float> gate_up = values(static_cast<size_t>(E * 2 * I * H), 5, 1.0f);
  const std::vector<float> down = values(static_cast<size_t>(E * H * I), 7, 1.0f);
  const Rows pairs[2] = {rows_of(0, 7, shape), rows_of(1, 3, shape)};
  const Rows& mine = pairs[shard.ep_rank];  // the TP pair of this ep rank holds these rows

  // This rank's experts, [block · per, (block + 1) · per).
  const int64_t block = routed.rank();
  const std::vector<float> my_gate_up(gate_up.begin() + block * per * 2 * I * H,
                                      gate_up.begin() + (block + 1) * per * 2 * I * H);
  const std::vector<float> my_down(down.begin() + block * per * H * I,
                                   down.begin() + (block + 1) * per * H * I);
  std::vector<float> y(static_cast<size_t>(mine.n * H), 0.0f), dx(y.size(), 0.0f), dw(mine.weights.size());
  std::vector<float> dgate_up(my_gate_up.size(), 0.0f), ddown(my_down.size(), 0.0f);
  dispatched_experts_forward<float>(routed, groups.tensor, shape, mine.n, mine.x.data(), mine.experts.data(),
                                    mine.weights.data(), my_gate_up.data(), my_down.data(), y.data());
  dispatched_experts_backward<float>(routed, groups.tensor, shape, mine.n, mine.x.data(), mine.experts.data(),
                                     mine.weights.data(), my_gate_up.data(), my_down.data(), mine.dy.data(),
                                     dx.data(), dw.data(), dgate_up.data(), ddown.data());

  // One rank with every expert: this pair's rows, and the weight gradients over both pairs' rows.
  std::vector<float> y1(y.size(), 0.0f), dx1(y.size(), 0.0f), dw1(dw.size());
  std::vector<float> dgate_up1(gate_up.size(), 0.0f), ddown1(down.size(), 0.0f), unused;
  cpu::experts_forward(shape, mine.n, mine.x.data(), mine.experts.data(), mine.weights.data(), gate_up.data(),
                       down.data(), y1.data());
  for (const Rows& r : pairs) {
    std::vector<float> dxr(static_cast<size_t>(r.n * H), 0.0f), dwr(r.weights.size());
    cpu::experts_backward(shape, r.n, r.x.data(), r.experts.data(), r.weights.data(), gate_up.data(),
                          down.data(), r.dy.data(), dxr.data(), dwr.data(), dgate_up1.data(), ddown1.data());
    if (&r == &mine) dx1 = dxr, dw1 = dwr;
  }
  const std::vector<float> block_gate_up(dgate_up1.begin() + block * per * 2 * I * H,
                                         dgate_up1.begin() + (block + 1) * per * 2 * I * H);
  const std::vector<float> block_down(ddown1.begin() + block * per * H * I,
                                      ddown1.begin() + (block + 1) * per * H * I);
  // Every value is a sum of at most 2I + H + k = 16 rounded products of O(1) values: another
  // blocking or order moves it by at most 2 · 16 units of 2^-24 of the largest magnitude.
  auto bound = [](const std::vector<float>& ref) {
    double most = 0;
    for (float v : ref) most = std::max(most, std::fabs(double(v)));
    return 32.0 * std::ldexp(1.0, -24) * std::max(most, 1.0);
  };
  double scale = 0;
  for (float v : block_gate_up) scale = std::max(scale, std::fabs(double(v)));
  for (float v : block_down) scale = std::max(scale, std::fabs(double(v)));
  const double outputs = std::max({max_diff(y, y1), max_diff(dx, dx1), max_diff(dw, dw1)});
  const bool close =
      max_diff(y, y1) <= bound(y1) && max_diff(dx, dx1) <= bound(dx1) && max_diff(dw, dw1) <= bound(dw1);
  const double grad = std::max(max_diff(dgate_up, block_gate_up), max_diff(ddown, block_down));
  // Each weight-gradient element sums the products of at most 10 rows, in another order.
  const bool ok = close && grad <= 10.0 * std::ldexp(1.0, -24) * std::max(scale, 1.0) && scale > 0;
  if (routed.rank() == 0)
    std::cout << nlohmann::json{{"outputs_within_bound", close},
                                {"max_output_diff", outputs},
                                {"max_weight_grad_diff", grad},
                                {"weight_grad_scale", scale}}
                     .dump()
              << std::endl;
  if (!ok)
    std::cerr << "expert_dispatch_check rank " << routed.rank() << ": outputs within bound " << close
              << " (y " << max_diff(y, y1) << ", dx " << max_diff(dx, dx1) << ", dweights "
              << max_diff(dw, dw1) << ")"
              << ", weight gradients within " << grad << " of scale " << scale << "\n";
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return check();
  } catch (const std::exception& e) {
    std::cerr << "expert_dispatch_check: " << e.what() << "\n";
    return 1;
  }
}
