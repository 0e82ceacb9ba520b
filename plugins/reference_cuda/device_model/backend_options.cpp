#include "device_model/backend_options.hpp"

#include <cstdlib>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

const char* to_string(GemmLibrary g) {
  return g == GemmLibrary::cublaslt ? "cublaslt" : "cublas";
}
const char* to_string(ExpertGemm e) {
  return e == ExpertGemm::grouped ? "grouped" : e == ExpertGemm::per_expert ? "per_expert" : "device_sized";
}

const char* to_string(AttentionLibrary a) {
  return a == AttentionLibrary::cudnn ? "cudnn" : "kernel";
}
const char* to_string(DecodeGraphMode g) {
  return g == DecodeGraphMode::decode ? "decode" : "off";
}

namespace {

[[noreturn]] void refuse(const std::string& where, std::string_view value, const char* choices) {
  throw sdk::Error(MLPT_INVALID_ARGUMENT,
                   where + ": expected one of " + choices + ", got \"" + std::string(value) + "\"");
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
  if (v == "device_sized") return ExpertGemm::device_sized;
  refuse(where, v, "\"grouped\", \"per_expert\", \"device_sized\"");
}

AttentionLibrary parse_attention_library(std::string_view v, const std::string& where) {
  if (v == "kernel") return AttentionLibrary::kernel;
  if (v == "cudnn") return AttentionLibrary::cudnn;
  refuse(where, v, "\"kernel\", \"cudnn\"");
}

DecodeGraphMode parse_decode_graphs(std::string_view v, const std::string& where) {
  if (v == "off") return DecodeGraphMode::off;
  if (v == "decode") return DecodeGraphMode::decode;
  refuse(where, v, "\"off\", \"decode\"");
}

ExpertForm choose_expert_form(ExpertGemm option, int64_t rows, int64_t top_k, int64_t num_experts) {
  if (option == ExpertGemm::per_expert) return ExpertForm::host_per_expert;
  if (option == ExpertGemm::device_sized) {
    if (rows * top_k < num_experts) return ExpertForm::per_slot;
    if (rows <= kAllExpertsMaxRows) return ExpertForm::all_experts;
  }
  return ExpertForm::host_grouped;
}

BackendOptions read_backend_options(sdk::Settings& s) {
  BackendOptions o;
  // choice_or names the component and key in its error; the parsers then cannot fail.
  o.gemm =
      parse_gemm_library(s.choice_or("cuda_gemm", to_string(o.gemm), {"cublas", "cublaslt"}), "cuda_gemm");
  o.experts = parse_expert_gemm(
      s.choice_or("cuda_experts", to_string(o.experts), {"grouped", "per_expert", "device_sized"}),
      "cuda_experts");
  o.attention = parse_attention_library(
      s.choice_or("cuda_attention", to_string(o.attention), {"kernel", "cudnn"}), "cuda_attention");
  o.graphs =
      parse_decode_graphs(s.choice_or("cuda_graphs", to_string(o.graphs), {"off", "decode"}), "cuda_graphs");
  return o;
}

BackendOptions with_overrides(BackendOptions o, const char* gemm, const char* experts, const char* attention,
                              const char* graphs) {
  if (gemm && *gemm) o.gemm = parse_gemm_library(gemm, "MLPT_CUDA_GEMM");
  if (experts && *experts) o.experts = parse_expert_gemm(experts, "MLPT_CUDA_EXPERTS");
  if (attention && *attention) o.attention = parse_attention_library(attention, "MLPT_CUDA_ATTENTION");
  if (graphs && *graphs) o.graphs = parse_decode_graphs(graphs, "MLPT_CUDA_GRAPHS");
  return o;
}

void check_combination(const BackendOptions& o, const std::string& where) {
  if (o.graphs == DecodeGraphMode::decode && o.attention == AttentionLibrary::cudnn)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     where +
                         ": cuda_graphs = \"decode\" does not yet go with cuda_attention = "
                         "\"cudnn\" (set one of them back: \"off\" or \"kernel\")");
}

BackendOptions with_environment(BackendOptions o) {
  return with_overrides(o, std::getenv("MLPT_CUDA_GEMM"), std::getenv("MLPT_CUDA_EXPERTS"),
                        std::getenv("MLPT_CUDA_ATTENTION"), std::getenv("MLPT_CUDA_GRAPHS"));
}

}  // namespace mlpt::ref
