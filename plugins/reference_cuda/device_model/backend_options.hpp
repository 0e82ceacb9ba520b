// The switches between a GPU backend's fast library paths and the paths they replace, read from a
// component's settings (and, for benchmarks, the environment), so one build runs either and a GPU
// run measures both side by side. Host logic only: parsed and tested on any machine.
//
//   cuda_gemm    "cublas" | "cublaslt": dense products through cublasGemmEx, or cublasLtMatmul with
//                the heuristic's algorithm cached per shape (backends/cuda/gemm.hpp);
//   cuda_experts "grouped" | "per_expert" | "device_sized": the routed experts' products as one
//                grouped call per projection (cublasGemmGroupedBatchedEx), or one product per
//                expert, both sized on the host from the per-expert token counts (one device-to-host
//                copy and synchronisation per MoE layer); or, for the forward of a small batch
//                (decode), forms sized on the device, with no host round trip (choose_expert_form);
//   cuda_attention "kernel" | "cudnn": the softmax(QK^T)V core of gated attention (causal, GQA,
//                packed sequences) by this backend's own kernels, or by cuDNN's fused attention
//                built through its graph API, one execution plan per shape (backends/cuda/
//                cudnn_attention.hpp); "cudnn" is refused by a build without cuDNN;
//   cuda_graphs  "off" | "decode": the engine's one-token steps run op by op, or recorded once per
//                batch bucket as CUDA graphs and replayed (device_model/decode_graphs.hpp; their
//                routed experts take the device-sized forms whatever cuda_experts says).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mlpt::sdk {
class Settings;  // mlpt/sdk/settings.hpp
}

namespace mlpt::ref {

enum class GemmLibrary { cublas, cublaslt };
enum class ExpertGemm { grouped, per_expert, device_sized };
enum class AttentionLibrary { kernel, cudnn };
enum class DecodeGraphMode { off, decode };

struct BackendOptions {
  // The paths every GPU test has checked are the defaults until a GPU run has checked the others.
  GemmLibrary gemm = GemmLibrary::cublas;
  ExpertGemm experts = ExpertGemm::grouped;
  AttentionLibrary attention = AttentionLibrary::kernel;
  DecodeGraphMode graphs = DecodeGraphMode::off;
};

const char* to_string(GemmLibrary g);
const char* to_string(ExpertGemm e);
const char* to_string(AttentionLibrary a);
const char* to_string(DecodeGraphMode g);
// Parses a value of cuda_gemm / cuda_experts / cuda_attention / cuda_graphs; throws MLPT_INVALID_ARGUMENT
// naming `where`, the value and the choices.
GemmLibrary parse_gemm_library(std::string_view value, const std::string& where);
ExpertGemm parse_expert_gemm(std::string_view value, const std::string& where);
AttentionLibrary parse_attention_library(std::string_view value, const std::string& where);
DecodeGraphMode parse_decode_graphs(std::string_view value, const std::string& where);

// How one experts_forward runs its products:
//   host_grouped / host_per_expert: tokens grouped by expert, the groups' sizes read on the host;
//   per_slot: one matrix-vector product per (row, slot) against its expert's weights, pointers
//     made on the device (reads only the experts routed to: best while slots < experts);
//   all_experts: every expert over every row as strided batched products, each row combining its
//     own experts' outputs (reads each expert once; the wasted rows cost compute a small batch has
//     to spare).
enum class ExpertForm { host_grouped, host_per_expert, per_slot, all_experts };
// Rows up to which device_sized runs the all_experts form (beyond, host_grouped).
constexpr int64_t kAllExpertsMaxRows = 128;
ExpertForm choose_expert_form(ExpertGemm option, int64_t rows, int64_t top_k, int64_t num_experts);

// The keys above from a component's settings (absent keys keep the defaults).
BackendOptions read_backend_options(sdk::Settings& s);

// The environment's overrides, given as the values of MLPT_CUDA_GEMM, MLPT_CUDA_EXPERTS,
// MLPT_CUDA_ATTENTION and MLPT_CUDA_GRAPHS; NULL or empty leaves an option as it is.
BackendOptions with_overrides(BackendOptions o, const char* gemm, const char* experts,
                              const char* attention = nullptr, const char* graphs = nullptr);
// with_overrides from this process's environment.
BackendOptions with_environment(BackendOptions o);

// Throws MLPT_INVALID_ARGUMENT naming `where` for switches that do not go together: cuda_graphs =
// "decode" with cuda_attention = "cudnn", until a GPU run has checked cuDNN's attention inside the
// decode graphs (its calls are recordable and its buffers among the recorder's scratch addresses).
void check_combination(const BackendOptions& o, const std::string& where);

}  // namespace mlpt::ref
