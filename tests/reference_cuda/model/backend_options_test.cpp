// The GPU backend's host-side choices, checked where no GPU is: the settings and environment
// switches between library paths (device_model/backend_options.hpp) and the per-shape plan cache
// cuBLASLt's algorithm choices live in (device_model/gemm_plan_cache.hpp).
#include "device_model/backend_options.hpp"

#include <catch2/catch.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_model/gemm_plan_cache.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/settings.hpp"

using namespace mlpt::ref;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

BackendOptions read(const std::string& json) {
  mlpt::sdk::Settings s(json, "trainer qwen35_cuda");
  return read_backend_options(s);
}

}  // namespace

TEST_CASE("backend options: settings select each library path, absent keys keep the checked paths") {
  const BackendOptions d = read("{}");
  CHECK(d.gemm == GemmLibrary::cublas);
  CHECK(d.experts == ExpertGemm::grouped);
  const BackendOptions o = read(R"({"cuda_gemm": "cublaslt", "cuda_experts": "per_expert"})");
  CHECK(o.gemm == GemmLibrary::cublaslt);
  CHECK(o.experts == ExpertGemm::per_expert);
  CHECK(std::string(to_string(o.gemm)) == "cublaslt");
  CHECK(std::string(to_string(o.experts)) == "per_expert");
  // Each value names itself back: the strings are the settings' own.
  for (GemmLibrary g : {GemmLibrary::cublas, GemmLibrary::cublaslt})
    CHECK(parse_gemm_library(to_string(g), "x") == g);
  for (ExpertGemm e : {ExpertGemm::grouped, ExpertGemm::per_expert, ExpertGemm::device_sized})
    CHECK(parse_expert_gemm(to_string(e), "x") == e);
}

TEST_CASE("backend options: a wrong value names the component, the key and the choices") {
  const std::string e = error_of([] { read(R"({"cuda_gemm": "cutlass"})"); });
  CHECK_THAT(e, Catch::Contains("trainer qwen35_cuda"));
  CHECK_THAT(e, Catch::Contains("cuda_gemm"));
  CHECK_THAT(e, Catch::Contains("\"cublaslt\""));
  CHECK_THAT(e, Catch::Contains("cutlass"));
  CHECK_THAT(error_of([] { read(R"({"cuda_experts": 2})"); }), Catch::Contains("cuda_experts"));
}

TEST_CASE("backend options: the environment overrides the settings, empty values leave them") {
  BackendOptions base;
  base.gemm = GemmLibrary::cublaslt;
  const BackendOptions same = with_overrides(base, nullptr, "");
  CHECK(same.gemm == GemmLibrary::cublaslt);
  CHECK(same.experts == ExpertGemm::grouped);
  const BackendOptions o = with_overrides(base, "cublas", "device_sized");
  CHECK(o.gemm == GemmLibrary::cublas);
  CHECK(o.experts == ExpertGemm::device_sized);
  CHECK_THAT(error_of([&] { with_overrides(base, "cuBLASLt", nullptr); }), Catch::Contains("MLPT_CUDA_GEMM"));
  CHECK_THAT(error_of([&] { with_overrides(base, nullptr, "fused"); }), Catch::Contains("MLPT_CUDA_EXPERTS"));
}

TEST_CASE("backend options: the expert form follows the option and, device-sized, the batch") {
  // Host-sized options never change with the batch.
  for (int64_t rows : {1, 64, 100000}) {
    CHECK(choose_expert_form(ExpertGemm::grouped, rows, 2, 16) == ExpertForm::host_grouped);
    CHECK(choose_expert_form(ExpertGemm::per_expert, rows, 2, 16) == ExpertForm::host_per_expert);
  }
  // Device-sized: per slot while the slots are fewer than the experts (each slot reads its expert
  // once; fewer slots than experts read fewer bytes than every expert), then every expert over every
  // row up to kAllExpertsMaxRows, then the host-sized grouped form.
  CHECK(choose_expert_form(ExpertGemm::device_sized, 1, 2, 16) == ExpertForm::per_slot);
  CHECK(choose_expert_form(ExpertGemm::device_sized, 7, 2, 16) == ExpertForm::per_slot);
  CHECK(choose_expert_form(ExpertGemm::device_sized, 8, 2, 16) == ExpertForm::all_experts);
  CHECK(choose_expert_form(ExpertGemm::device_sized, 63, 8, 512) == ExpertForm::per_slot);
  CHECK(choose_expert_form(ExpertGemm::device_sized, kAllExpertsMaxRows, 2, 16) == ExpertForm::all_experts);
  CHECK(choose_expert_form(ExpertGemm::device_sized, kAllExpertsMaxRows + 1, 2, 16) ==
        ExpertForm::host_grouped);
  CHECK(read(R"({"cuda_experts": "device_sized"})").experts == ExpertGemm::device_sized);
}

TEST_CASE("gemm plan cache: one plan per shape, reused, the least recently used forgotten") {
  GemmPlanCache<std::string> cache(2);
  int made = 0;
  auto plan_for = [&](const GemmShapeKey& k) -> std::string& {
    return cache.get(k, [&] {
      ++made;
      return std::to_string(k.m) + "x" + std::to_string(k.n);
    });
  };
  GemmShapeKey a{true, false, 128, 64, 32, 32, 32, 128, false, false, 16};
  GemmShapeKey b = a, c = a;
  b.m = 256;
  c.accumulate = true;  // same sizes, another call: another plan
  CHECK(plan_for(a) == "128x64");
  CHECK(plan_for(a) == "128x64");
  CHECK(made == 1);
  CHECK(cache.hits() == 1);
  plan_for(b);
  plan_for(a);  // a is now the most recent, b the least
  plan_for(c);  // full: b goes
  CHECK(made == 3);
  CHECK(cache.size() == 2);
  CHECK(cache.contains(a));
  CHECK(cache.contains(c));
  CHECK_FALSE(cache.contains(b));
  CHECK(cache.misses() == 3);
  // A plan whose making throws is not kept, and the cache still works.
  GemmShapeKey d = a;
  d.k = 48;
  CHECK_THROWS(cache.get(d, []() -> std::string { throw std::runtime_error("no algorithm"); }));
  CHECK_FALSE(cache.contains(d));
  CHECK(cache.size() == 2);
  // Keys differing only in alignment or output type are different shapes to the library.
  GemmShapeKey e = a, f = a;
  e.alignment = 2;
  f.fp32_out = true;
  CHECK_FALSE(e == a);
  CHECK_FALSE(f == a);
  CHECK(GemmShapeKeyHash{}(a) == GemmShapeKeyHash{}(GemmShapeKey(a)));
}

TEST_CASE("gemm plan cache: the alignment operands share is the largest power of two dividing all") {
  alignas(256) static char buf[1024];
  CHECK(common_alignment({buf}) == 256);
  CHECK(common_alignment({buf, buf + 16}) == 16);
  CHECK(common_alignment({buf + 64, buf + 128, buf + 512}) == 64);
  CHECK(common_alignment({buf + 2, buf + 16}) == 2);
  CHECK(common_alignment({buf + 1}) == 1);
}
