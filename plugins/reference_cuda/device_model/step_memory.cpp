#include "device_model/step_memory.hpp"

#include <algorithm>

#include "device_model/rank_memory.hpp"
#include "device_model/vocab_head.hpp"
#include "mlpt/sdk/error.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"

namespace mlpt::ref::dev {

int64_t in_flight_micro_batches(int pp, int stage, int64_t micro_batches) {
  if (pp < 1 || stage < 0 || stage >= pp || micro_batches < 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "stage " + std::to_string(stage) + " of pipeline_parallel " +
                                                std::to_string(pp) + " over " +
                                                std::to_string(micro_batches) + " micro-batches");
  return std::min<int64_t>(pp - stage, micro_batches);
}

double step_scratch_bytes(const ModelConfig& c, int64_t tokens) {
  const double H = double(c.hidden_size), q = double(c.num_heads * c.head_dim),
               kv = double(c.num_kv_heads * c.head_dim), k = double(c.experts_per_token),
               E = double(c.num_experts);
  const double C = double(c.conv_dim()), vd = double(c.value_dim()), kd = double(c.key_dim()),
               Hv = double(c.gdn_value_heads), Is = double(c.shared_intermediate);
  const double routed = k * double(c.moe_intermediate);
  // The backward's reused buffers, each as wide as its widest use (model.cpp's GDN, attention and
  // MoE backward): b0..b5 bf16, f0..f3 fp32.
  const double backward = 2 * (std::max({vd, C, q}) + std::max({vd, C, kv, H}) + std::max({vd, 2 * q, Is}) +
                               std::max({vd, q, Is}) + std::max({Hv, kv, Is}) + std::max({Hv, kv, E})) +
                          4 * (std::max(kd, k) + std::max(kd, E) + 2 * Hv);
  // Everything else per token at 4 bytes (fp32, the wider of the two the model keeps):
  const double width = 8 * H                                   // residual tape, dx, dxn, dtmp
                       + 3 * C + 4 * vd + 4 * Hv               // GDN tape and its gates
                       + 6 * q + 4 * kv + double(c.num_heads)  // attention tape
                       + E + 3 * k                             // router logits, weights, choices
                       + 3 * (routed + Is) + 2 * k * H         // expert slots and outputs
                       + 6 * H;                                // dispatch staging and TP sums
  return (4.0 * width + backward) * double(tokens);
}

StepMemory step_memory(const ModelConfig& full, const ModelShard& shard, const std::vector<int64_t>& tokens,
                       int data_parallel, bool moe_parallel_folding) {
  for (int64_t n : tokens)
    if (n < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "a micro-batch of " + std::to_string(n) + " tokens");
  const ModelConfig c = shard_config(full, shard);
  const bool first = c.shard.first_stage(), last = c.shard.last_stage();
  const int64_t m = static_cast<int64_t>(tokens.size());
  StepMemory out;
  if (m == 0) return out;
  out.in_flight = in_flight_micro_batches(c.shard.pp, c.shard.pp_rank, m);
  int64_t window = 0;  // the most tokens of in_flight consecutive micro-batches
  for (int64_t b = 0; b + out.in_flight <= m; ++b) {
    int64_t sum = 0;
    for (int64_t j = b; j < b + out.in_flight; ++j) sum += tokens[size_t(j)];
    window = std::max(window, sum);
  }
  const int64_t most = *std::max_element(tokens.begin(), tokens.end());
  const double H = double(full.hidden_size), row = double(most) * H;  // the largest [N, H]
  const int64_t layers = stage_layers(full.num_layers, c.shard).count();
  out.kept_inputs = double(window) * H * 2 * double(layers + 1 + (last ? 1 : 0));
  if (last) {
    const double V = double(VocabHead(c, nullptr, full.vocab_size).width());
    out.head = double(std::min(kHeadBlockRows, most)) * V * (4 + 2) + row * 2 + 7.0 * double(most) * 4;
  }
  out.messages = ((first ? 0 : 2) + (last ? 0 : 2)) * row * 4;
  out.scratch_bound = step_scratch_bytes(c, most);
  const ModelLayout layout = shard_layout(full, shard);
  const std::vector<int> replicas = optimizer_replicas(layout, shard, data_parallel, moe_parallel_folding);
  int64_t range = 0, whole = 0;  // the largest of each over the split tensors
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const int64_t n = layout.tensors[i].numel();
    if (replicas[i] < 2 || n == 0) continue;
    range = std::max({range, largest_range(n, replicas[i]), int64_t(1)});
    whole = std::max(whole, n);
  }
  out.optimizer = double(range + whole) * 4;
  return out;
}

StepMemory busiest_step_memory(const ModelConfig& full, int tp, int ep, int etp, int pp, int data_parallel,
                               int64_t tokens, int64_t micro_batches, bool moe_parallel_folding,
                               ModelShard* busiest) {
  StepMemory most;
  double most_bytes = -1;
  for (int r = 0; r < tp * ep * pp; ++r) {
    const ModelShard shard = ModelShard::of_model_rank(tp, ep, pp, r, etp);
    const StepMemory m = step_memory(full, shard, std::vector<int64_t>(size_t(micro_batches), tokens),
                                     data_parallel, moe_parallel_folding);
    const double bytes =
        rank_memory_of(full, shard, data_parallel, moe_parallel_folding).trainer() + m.total();
    if (bytes > most_bytes) {
      most_bytes = bytes, most = m;
      if (busiest) *busiest = shard;
    }
  }
  return most;
}

}  // namespace mlpt::ref::dev
