// The mlpt_reference plugin: the Qwen3.5 MoE reference engine and trainer on the CPU backend
// (qwen35_cpu), the GPU components' code on the CPU with bf16 emulated (qwen35_bf16), and, when
// built with CUDA (MLPT_REFERENCE_CUDA), the engine and trainer on the GPU (qwen35_cuda).
#include "engine/bf16_engine.hpp"
#include "engine/cpu_backend.hpp"
#include "trainer/bf16_trainer.hpp"
#include "trainer/trainer.hpp"
#ifdef MLPT_REFERENCE_CUDA
#include "backends/cuda/components/engine_backend.hpp"
#include "backends/cuda/components/trainer.hpp"
#endif

namespace {

const mlpt_engine_capabilities kEngineCaps = {MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE,
                                              /*returns_logprobs=*/1, /*returns_routed_experts=*/1,
                                              /*keeps_sessions=*/1, /*supports_cancel=*/1,
                                              /*deterministic_seed=*/1};
const mlpt_trainer_capabilities kTrainerCaps = {MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE,
                                                /*supports_routing_replay=*/1, /*supports_state_save=*/1,
                                                /*device_type=*/kDLCPU};
#ifdef MLPT_REFERENCE_CUDA
const mlpt_trainer_capabilities kCudaTrainerCaps = {MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE,
                                                    /*supports_routing_replay=*/1, /*supports_state_save=*/1,
                                                    /*device_type=*/kDLCUDA};
#define MLPT_REFERENCE_CUDA_COMPONENTS                                                                 \
  , mlpt::sdk::engine_component<mlpt::ref::cuda::CudaEngine>(                                          \
        "qwen35_cuda", "Qwen3.5 MoE reference engine (CUDA, bf16, paged KV, continuous batching)", &kEngineCaps), \
    mlpt::sdk::trainer_component<mlpt::ref::cuda::CudaTrainer>(                                        \
        "qwen35_cuda", "Qwen3.5 MoE reference GRPO trainer (CUDA, bf16, fp32 AdamW, R3 replay)", &kCudaTrainerCaps)
#else
#define MLPT_REFERENCE_CUDA_COMPONENTS
#endif

}  // namespace

MLPT_SDK_PLUGIN("mlpt-reference", "0.1.0",
                mlpt::sdk::engine_component<mlpt::ref::CpuEngine>(
                    "qwen35_cpu", "Qwen3.5 MoE reference engine (CPU, fp32, continuous batching)", &kEngineCaps),
                mlpt::sdk::trainer_component<mlpt::ref::ReferenceTrainer>(
                    "qwen35_cpu", "Qwen3.5 MoE reference GRPO trainer (CPU, fp32 AdamW, R3 replay)", &kTrainerCaps),
                mlpt::sdk::engine_component<mlpt::ref::Bf16Engine>(
                    "qwen35_bf16", "Qwen3.5 MoE engine: qwen35_cuda's code on the CPU, bf16 emulated", &kEngineCaps),
                mlpt::sdk::trainer_component<mlpt::ref::Bf16Trainer>(
                    "qwen35_bf16", "Qwen3.5 MoE GRPO trainer: qwen35_cuda's code on the CPU, bf16 emulated", &kTrainerCaps)
                    MLPT_REFERENCE_CUDA_COMPONENTS)
