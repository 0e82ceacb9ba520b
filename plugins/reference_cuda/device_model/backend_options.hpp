// The switches between a GPU backend's fast library paths and the paths they replace, read from a
// component's settings (and, for benchmarks, the environment), so one build runs either and a GPU
// run measures both side by side. Host logic only: parsed and tested on any machine.
//
//   cuda_gemm    "cublas" | "cublaslt": dense products through cublasGemmEx, or cublasLtMatmul with
//                the heuristic's algorithm cached per shape (backends/cuda/gemm.hpp);
//   cuda_experts "grouped" | "per_expert": the routed experts' products as one grouped call per
//                projection (cublasGemmGroupedBatchedEx), or one product per expert;
//   cuda_graphs  true | false: the engine's decode steps captured once per batch bucket as a CUDA
//                graph and replayed (device_model/decode_graphs.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

enum class GemmLibrary { cublas, cublaslt };
enum class ExpertGemm { grouped, per_expert };

struct BackendOptions {
  // The paths every GPU test has checked are the defaults until a GPU run has checked the others.
  GemmLibrary gemm = GemmLibrary::cublas;
  ExpertGemm experts = ExpertGemm::grouped;
  bool graphs = false;
};

const char* to_string(GemmLibrary g);
const char* to_string(ExpertGemm e);
// Parses a value of cuda_gemm / cuda_experts; throws MLPT_INVALID_ARGUMENT naming `where`, the
// value and the choices.
GemmLibrary parse_gemm_library(std::string_view value, const std::string& where);
ExpertGemm parse_expert_gemm(std::string_view value, const std::string& where);

// The keys above from a component's settings (absent keys keep the defaults).
BackendOptions read_backend_options(sdk::Settings& s);

// The environment's overrides, given as the values of MLPT_CUDA_GEMM, MLPT_CUDA_EXPERTS and
// MLPT_CUDA_GRAPHS ("1"/"0", "true"/"false"); NULL or empty leaves an option as it is.
BackendOptions with_overrides(BackendOptions o, const char* gemm, const char* experts, const char* graphs);
// with_overrides from this process's environment.
BackendOptions with_environment(BackendOptions o);

}  // namespace mlpt::ref
