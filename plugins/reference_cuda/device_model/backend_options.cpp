#include "device_model/backend_options.hpp"

#include <cstdlib>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

const char* to_string(GemmLibrary g) {
  return g == GemmLibrary::cublaslt ? "cublaslt" : "cublas";
}
const char* to_string(ExpertGemm e) {
  return e == ExpertGemm::grouped ? "grouped" : "per_expert";
}

namespace {

[[noreturn]] void refuse(const std::string& where, std::string_view value, const char* choices) {
  throw sdk::Error(MLPT_INVALID_ARGUMENT,
                   where + ": expected one of " + choices + ", got \"" + std::string(value) + "\"");
}

bool parse_flag(std::string_view v, const std::string& where) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  refuse(where, v, "\"1\", \"0\", \"true\", \"false\"");
}

}  // namespace

GemmLibrary parse_gemm_library(std::string_view v, const std::string& where) {
  if (v == "cublas") return GemmLibrary::cublas;
  if (v == "cublaslt") return GemmLibrary::cublaslt;
  refuse(where, v, "\"cublas\", \"cublaslt\"");
}

ExpertGemm parse_expert_gemm(std::string_view v, const std::string& where) {
  if (v == "grouped") return ExpertGemm::grouped;
  if (v == "per_expert") return ExpertGemm::per_expert;
  refuse(where, v, "\"grouped\", \"per_expert\"");
}

BackendOptions read_backend_options(sdk::Settings& s) {
  BackendOptions o;
  // choice_or names the component and key in its error; the parsers then cannot fail.
  o.gemm =
      parse_gemm_library(s.choice_or("cuda_gemm", to_string(o.gemm), {"cublas", "cublaslt"}), "cuda_gemm");
  o.experts = parse_expert_gemm(s.choice_or("cuda_experts", to_string(o.experts), {"grouped", "per_expert"}),
                                "cuda_experts");
  o.graphs = s.boolean_or("cuda_graphs", o.graphs);
  return o;
}

BackendOptions with_overrides(BackendOptions o, const char* gemm, const char* experts, const char* graphs) {
  if (gemm && *gemm) o.gemm = parse_gemm_library(gemm, "MLPT_CUDA_GEMM");
  if (experts && *experts) o.experts = parse_expert_gemm(experts, "MLPT_CUDA_EXPERTS");
  if (graphs && *graphs) o.graphs = parse_flag(graphs, "MLPT_CUDA_GRAPHS");
  return o;
}

BackendOptions with_environment(BackendOptions o) {
  return with_overrides(o, std::getenv("MLPT_CUDA_GEMM"), std::getenv("MLPT_CUDA_EXPERTS"),
                        std::getenv("MLPT_CUDA_GRAPHS"));
}

}  // namespace mlpt::ref
