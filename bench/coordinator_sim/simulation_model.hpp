// The timed stand-ins of the coordinator simulation: what one episode costs, how fast an engine
// replica decodes, how long a training step and a refit take, and the cluster they run on. Every
// number is an assumption stated with its reason; none is fitted to a trace of the reference. The
// benchmark's own limits (30 actions, 300 s command and test timeouts, 1800 s agent timeout) come
// from core/rules/closed_division.hpp.
#pragma once

#include <cstdint>
#include <string>

namespace mlpt::coordinator_sim {

// A lognormal distribution by its median and the standard deviation of its logarithm: a median is
// what one reads off a trace; sigma sets the tail (sigma 1 puts the 99th percentile at ~10x median).
struct LogNormal {
  double median = 1.0;
  double sigma = 0.0;
};

struct EpisodeModel {
  // Agent iterations per episode, clamped to [1, kMaxTurns]: SWE agents mostly finish in 8-20 steps
  // and a few percent run into the iteration cap (sigma 0.5 puts ~3% at 30).
  LogNormal turns{12.0, 0.5};
  // Tokens the model generates per reply: thinking is off in the reference, so most replies are a
  // short tool call; a few are long edits or explanations.
  LogNormal reply_tokens{200.0, 0.9};
  // Tokens each tool observation adds to the context (command output, file views).
  LogNormal observation_tokens{300.0, 1.0};
  int64_t prompt_tokens = 2500;  // the task prompt (problem statement and instructions)
  // Seconds one sandbox command takes (ls, grep, small edits are instant; a test run is not),
  // capped at the command timeout.
  LogNormal command_s{1.5, 1.0};
  // Seconds for the hidden tests that grade a finished episode, capped at the test timeout.
  LogNormal test_s{20.0, 0.7};
  // Seconds to start an Apptainer sandbox from a local SIF and copy the repository in.
  LogNormal sandbox_start_s{3.0, 0.4};
};

struct EngineModel {
  // One decode step of a replica with b sequences takes step_s + per_sequence_s * b (continuous
  // batching): the fixed part is reading the replica's share of the weights (397B BF16 over 8 GPUs,
  // ~100 GB per GPU at ~8 TB/s HBM, most experts touched at these batch sizes); the per-sequence
  // part is attention and routing. At ~11 sequences per replica a sequence decodes at ~80 token/s.
  double step_s = 0.008;
  double per_sequence_s = 0.0004;
  int64_t gpus_per_replica = 8;  // vLLM TP8 x EP8 in the reference recipe: two 4-GPU nodes
};

struct TrainerModel {
  // Training FLOPs per step = 8 x active parameters x tokens: forward and backward (6) plus the
  // forward that recomputes the previous policy's logprobs (2).
  double active_parameters = 17.2e9;
  // Sustained BF16 FLOP/s per trainer GPU: ~16% of a GB300's dense peak, what large MoE training
  // with expert and pipeline parallelism reaches.
  double flops_per_gpu = 400e12;
  double optimizer_step_s = 4.0;  // AdamW over the sharded fp32 state and the all-reduces around it
  // Trainer state per parameter: BF16 weights and gradients (2 + 2), fp32 master weights (4), AdamW
  // moments (4 + 4); the trainer group must hold it in 85% of its GPU memory.
  double total_parameters = 397e9;
  double state_bytes_per_parameter = 16.0;
  double gpu_memory_bytes = 288e9;  // GB300
  double usable_memory_fraction = 0.85;
  double refit_s = 15.0;  // broadcast-based refit of the reference (spec section 7: 10-15 s)
};

// Where the processes go: the trainer group takes whole nodes, engine replicas the rest.
struct Placement {
  int64_t nodes = 64;
  int64_t gpus_per_node = 4;
  int64_t trainer_nodes = 16;
  int64_t concurrent_episodes = 256;  // the reference's episode slots (rollout workers)
};

// The benchmark loop's settings (closed division at GBS 256 by default).
struct LoopSettings {
  int64_t prompts_per_step = 16;
  int64_t generations_per_prompt = 16;
  int64_t max_trajectory_age_steps = 1;
  // false (the reference): a refit first drains every episode in flight; true: episodes keep running
  // and their next turns use the new weights (the product's optional in_flight_weight_updates).
  bool in_flight_weight_updates = false;
  int64_t steps = 20;               // past the first evaluation (after step 18 at GBS 256)
  int64_t validation_tasks = 256;   // pass@4: 4 episodes per task
};

struct SimulationModel {
  EpisodeModel episode;
  EngineModel engine;
  TrainerModel trainer;
  LoopSettings loop;
};

// Engine replicas a placement leaves; throws mlpt::Error naming the placement when it leaves none
// or when the trainer group cannot hold the trainer state.
int64_t engine_replicas(const Placement& placement, const SimulationModel& model);

}  // namespace mlpt::coordinator_sim
