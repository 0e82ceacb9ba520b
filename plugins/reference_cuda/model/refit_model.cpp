#include "model/refit_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

double sparse_bytes_per_element(double f) {
  if (!(f >= 0 && f <= 1)) throw sdk::Error(MLPT_INVALID_ARGUMENT, "changed fraction must be in [0, 1]");
  if (f == 0) return 0;
  // A gap of g elements takes ceil(bits(g) / 7) LEB128 bytes; evenly spread changes have g ~ 1/f - 1.
  const double gap = std::max(0.0, 1.0 / f - 1.0);
  const double leb = gap < 128 ? 1 : std::ceil(std::log2(gap + 1) / 7);
  return std::min({f * (leb + 2), 0.125 + 2 * f, 2.0});
}

RefitTime refit_time(const ModelConfig& c, const PlanRequest& r, const RefitLinks& links, double f) {
  MemoryPlan plan = plan_memory(c, r);  // checks the layouts against the model and the GPUs
  RefitTime t;
  t.model_bytes = 2.0 * static_cast<double>(plan.params.total);
  t.engine_shard_bytes = plan.engine.weights;
  t.wire_fraction = f < 0 ? 1.0 : sparse_bytes_per_element(f) / 2.0;
  const double wire = t.engine_shard_bytes * t.wire_fraction;
  t.network_s = wire / links.network_bytes_per_s;
  // Regrouping inside the node: all but this GPU's own 1/gpus_per_node of what the node received.
  const double g = static_cast<double>(r.gpus_per_node);
  t.nvlink_s = wire * (g - 1) / g / links.nvlink_bytes_per_s;
  // Applying: dense writes the shard; sparse reads the update and rewrites the touched elements,
  // bounded by one pass over the shard.
  t.apply_s = (f < 0 ? t.engine_shard_bytes : std::min(t.engine_shard_bytes, 2 * wire)) / links.hbm_bytes_per_s;
  return t;
}

std::string format_refit(const ModelConfig& c, const PlanRequest& r, const RefitLinks& links, double f) {
  auto line = [&](const char* what, const RefitTime& t) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-8s wire %.3f GiB per engine GPU (%.4f of dense): network %.3f s + NVLink %.3f s + apply %.3f s = %.3f s\n",
                  what, t.engine_shard_bytes * t.wire_fraction / double(1ull << 30), t.wire_fraction, t.network_s, t.nvlink_s,
                  t.apply_s, t.total_s());
    return std::string(buf);
  };
  RefitTime dense = refit_time(c, r, links, -1), sparse = refit_time(c, r, links, f);
  std::ostringstream o;
  char head[320];
  std::snprintf(head, sizeof head,
                "refit model: %.1f GB of BF16 weights, trainer %s -> engine %s (%.1f GiB per engine GPU); links per GPU: "
                "network %.0f GB/s, NVLink %.0f GB/s, HBM %.0f GB/s; changed fraction %.4g\n",
                dense.model_bytes / 1e9, to_string(r.trainer).c_str(), to_string(r.engine).c_str(),
                dense.engine_shard_bytes / double(1ull << 30), links.network_bytes_per_s / 1e9, links.nvlink_bytes_per_s / 1e9,
                links.hbm_bytes_per_s / 1e9, f);
  o << head << line("dense", dense) << line("sparse", sparse);
  o << (sparse.total_s() < 1.0 ? "sparse refit meets the 1 s goal\n" : "sparse refit misses the 1 s goal\n");
  return o.str();
}

}  // namespace mlpt::ref
