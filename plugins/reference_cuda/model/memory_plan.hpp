// What one GPU holds when the model is split across many: parameter counts from the config, and a
// per-GPU memory model for a Megatron-style trainer (TP x PP x EP, distributed optimizer, full
// activation recomputation, 1F1B pipeline) and a vLLM-style engine (TP x EP replicas). A model with
// its assumptions printed, not a measurement: `mlpt model plan` reports it.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.hpp"

namespace mlpt::ref {

// "tp4,pp2,ep32": any of tp, pp, ep (each at most once, positive); missing ones are 1.
struct ParallelLayout {
  int64_t tp = 1, pp = 1, ep = 1;
};
ParallelLayout parse_parallel_layout(const std::string& text);  // throws naming the bad part
std::string to_string(const ParallelLayout& l);

// Parameters of the text model (no MTP, no vision tower), from the config's tensor list.
struct ParameterCount {
  int64_t total = 0;
  int64_t routed_experts = 0;   // mlp.experts.* of every layer
  int64_t vocabulary = 0;       // embedding + LM head
  int64_t active_per_token() const;  // all but the unused routed experts
  int64_t experts_per_token = 0, num_experts = 0;
};
ParameterCount count_parameters(const ModelConfig& config);

struct PlanRequest {
  ParallelLayout trainer, engine;
  int64_t nodes = 0;           // all nodes of the run
  int64_t trainer_nodes = 0;   // of which training (0: a quarter, as in the reference: 16 of 64)
  int64_t gpus_per_node = 4;
  double gpu_bytes = 0;        // memory of one GPU
  int64_t context = 65536;     // tokens per sequence (activations, KV)
};

struct TrainerGpu {  // bytes on the busiest GPU (a pipeline stage with an embedding or LM head)
  int64_t world = 0, dp = 0, expert_dp = 0;
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

struct EngineGpu {
  int64_t gpus_per_replica = 0, replicas = 0;
  double weights = 0;
  double kv_per_token = 0;            // attention K and V of one token, this GPU's heads
  double kv_per_session = 0;          // at `context` tokens
  double gdn_state_per_session = 0;   // recurrent state (fp32) + conv window, this GPU's heads
  double usable = 0;                  // gpu_bytes x 0.9 (vLLM's gpu_memory_utilization default)
  int64_t sessions_per_replica = 0;   // full-context sessions that fit beside the weights
};

struct MemoryPlan {
  ParameterCount params;
  TrainerGpu trainer;
  EngineGpu engine;
  bool trainer_fits = false, engine_fits = false;
};

// Throws MLPT_INVALID_ARGUMENT naming the layout and the dimension it does not divide.
MemoryPlan plan_memory(const ModelConfig& config, const PlanRequest& request);
// The report `mlpt model plan` prints: every number with its unit and the assumptions.
std::string format_plan(const ModelConfig& config, const PlanRequest& request, const MemoryPlan& plan);

// "288GiB", "80GB", "1.5TiB" or plain bytes.
double parse_bytes(const std::string& text);

}  // namespace mlpt::ref
