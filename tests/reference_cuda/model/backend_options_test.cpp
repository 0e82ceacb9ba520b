// The GPU backend's host-side choices, checked where no GPU is: the settings and environment
// switches between library paths (device_model/backend_options.hpp) and the per-shape plan cache
// cuBLASLt's algorithm choices live in (device_model/gemm_plan_cache.hpp), and what the fused
// attention library is asked for (device_model/sdpa_plan.hpp: the shape a plan is kept for, its
// errors, the backward's scratch, the per-sequence inputs the device makes).
#include "device_model/backend_options.hpp"

#include <catch2/catch.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_model/gemm_plan_cache.hpp"
#include "device_model/sdpa_plan.hpp"
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
  CHECK(d.attention == AttentionLibrary::kernel);
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
  for (AttentionLibrary a : {AttentionLibrary::kernel, AttentionLibrary::cudnn})
    CHECK(parse_attention_library(to_string(a), "x") == a);
  CHECK(read(R"({"cuda_attention": "cudnn"})").attention == AttentionLibrary::cudnn);
  CHECK(read(R"({"cuda_attention": "kernel"})").attention == AttentionLibrary::kernel);
}

TEST_CASE("backend options: a wrong value names the component, the key and the choices") {
  const std::string e = error_of([] { read(R"({"cuda_gemm": "cutlass"})"); });
  CHECK_THAT(e, Catch::Contains("trainer qwen35_cuda"));
  CHECK_THAT(e, Catch::Contains("cuda_gemm"));
  CHECK_THAT(e, Catch::Contains("\"cublaslt\""));
  CHECK_THAT(e, Catch::Contains("cutlass"));
  CHECK_THAT(error_of([] { read(R"({"cuda_experts": 2})"); }), Catch::Contains("cuda_experts"));
  const std::string a = error_of([] { read(R"({"cuda_attention": "flash"})"); });
  CHECK_THAT(a, Catch::Contains("trainer qwen35_cuda"));
  CHECK_THAT(a, Catch::Contains("cuda_attention"));
  CHECK_THAT(a, Catch::Contains("\"cudnn\""));
  CHECK_THAT(a, Catch::Contains("flash"));
  CHECK_THAT(error_of([] { parse_attention_library("cuDNN", "cuda_attention"); }),
             Catch::Contains("\"kernel\", \"cudnn\""));
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
  CHECK(with_overrides(base, nullptr, nullptr, "").attention == AttentionLibrary::kernel);
  const BackendOptions a = with_overrides(base, nullptr, nullptr, "cudnn");
  CHECK(a.attention == AttentionLibrary::cudnn);
  CHECK(a.gemm == GemmLibrary::cublaslt);
  CHECK(with_overrides(a, nullptr, nullptr, "kernel").attention == AttentionLibrary::kernel);
  const std::string e = error_of([&] { with_overrides(base, nullptr, nullptr, "flash"); });
  CHECK_THAT(e, Catch::Contains("MLPT_CUDA_ATTENTION"));
  CHECK_THAT(e, Catch::Contains("flash"));
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

TEST_CASE("sdpa plan: length buckets are the next power of two, never shorter than the batch") {
  CHECK(sdpa_length_bucket(1) == 64);
  CHECK(sdpa_length_bucket(64) == 64);
  CHECK(sdpa_length_bucket(65) == 128);
  CHECK(sdpa_length_bucket(4096) == 4096);
  CHECK(sdpa_length_bucket(8192 + 1) == 16384);
  CHECK(sdpa_length_bucket(65536) == 65536);
  // Every token count maps to a bucket that holds it and is less than twice it (above the floor).
  for (int64_t t = 1; t < 70000; t += 977) {
    const int64_t b = sdpa_length_bucket(t);
    CHECK(b >= t);
    CHECK((b == 64 || b < 2 * t));
    CHECK((b & (b - 1)) == 0);
  }
}

TEST_CASE("sdpa plan: one key per pass, sequence count, buckets and heads, shared by micro-batches") {
  const SdpaShapeKey a = sdpa_shape_key(SdpaPass::forward, 16, 2, 256, 4, 4000, 4000, "x");
  CHECK(a.batch == 4);
  CHECK(a.max_q == 4096);
  CHECK(a.max_kv == 4096);
  CHECK(a.heads == 16);
  CHECK(a.kv_heads == 2);
  CHECK(a.head_dim == 256);
  // Another micro-batch of four sequences with 3000 tokens reuses the plan; a backward does not.
  CHECK(sdpa_shape_key(SdpaPass::forward, 16, 2, 256, 4, 3000, 3000, "x") == a);
  const SdpaShapeKey b = sdpa_shape_key(SdpaPass::backward, 16, 2, 256, 4, 3000, 3000, "x");
  CHECK_FALSE(b == a);
  CHECK(SdpaShapeKeyHash{}(a) != SdpaShapeKeyHash{}(b));
  CHECK_FALSE(sdpa_shape_key(SdpaPass::forward, 16, 2, 256, 5, 4000, 4000, "x") == a);
  CHECK(describe(a) == "forward: 4 sequences, q <= 4096, kv <= 4096 tokens, 16/2 heads, head_dim 256");
  // The plan cache keeps them apart.
  GemmPlanCache<int, SdpaShapeKey, SdpaShapeKeyHash> cache(4);
  int made = 0;
  cache.get(a, [&] { return ++made; });
  cache.get(sdpa_shape_key(SdpaPass::forward, 16, 2, 256, 4, 3000, 3000, "x"), [&] { return ++made; });
  cache.get(b, [&] { return ++made; });
  CHECK(made == 2);
  CHECK(cache.hits() == 1);
}

TEST_CASE("sdpa plan: a shape the library cannot take is refused, naming the call and the numbers") {
  const std::string heads =
      error_of([] { sdpa_shape_key(SdpaPass::forward, 6, 4, 256, 1, 8, 8, "attn_fwd"); });
  CHECK_THAT(heads, Catch::Contains("attn_fwd"));
  CHECK_THAT(heads, Catch::Contains("6"));
  CHECK_THAT(heads, Catch::Contains("4"));
  CHECK_THAT(error_of([] { sdpa_shape_key(SdpaPass::forward, 4, 4, 100, 1, 8, 8, "y"); }),
             Catch::Contains("head_dim 100"));
  CHECK_THAT(error_of([] { sdpa_shape_key(SdpaPass::backward, 4, 4, 64, 0, 8, 8, "z"); }),
             Catch::Contains("sequences 0"));
  CHECK_THAT(error_of([] { sdpa_shape_key(SdpaPass::backward, 4, 4, 64, 1, 8, 0, "z"); }),
             Catch::Contains("kv tokens 0"));
}

TEST_CASE("sdpa plan: the backward's scratch is sized by tokens, per-head gradients only when grouped") {
  const int64_t Tq = 1000, Tkv = 1000, H = 16, Hkv = 2, D = 256;
  const SdpaShapeKey g = sdpa_shape_key(SdpaPass::backward, H, Hkv, D, 3, Tq, Tkv, "x");
  const SdpaBackwardScratch s = sdpa_backward_scratch(g, Tq, Tkv);
  CHECK(s.row_sums >= size_t(Tq * H * 4));
  CHECK(s.dq_accum >= size_t(Tq * H * D * 4));
  CHECK(s.dk_per_head >= size_t(Tkv * H * D * 2));
  CHECK(s.dv_per_head == s.dk_per_head);
  CHECK(s.total == s.row_sums + s.dq_accum + s.dk_per_head + s.dv_per_head);
  for (size_t part : {s.row_sums, s.dq_accum, s.dk_per_head}) CHECK(part % 256 == 0);
  // Whole tiles: 1000 tokens take 1024 rows, so a tile overhanging the last sequence stays inside.
  CHECK(s.dq_accum >= size_t(1024 * H * D * 4));
  CHECK(s.row_sums >= size_t(1024 * H * 4));
  // Not the bucket: 1000 tokens do not pay for 1024 × batch rows.
  CHECK(s.dq_accum < size_t(3 * 1024 * H * D * 4));
  const SdpaShapeKey mha = sdpa_shape_key(SdpaPass::backward, H, H, D, 3, Tq, Tkv, "x");
  const SdpaBackwardScratch m = sdpa_backward_scratch(mha, Tq, Tkv);
  CHECK(m.dk_per_head == 0);
  CHECK(m.dv_per_head == 0);
  CHECK(m.total == m.row_sums + m.dq_accum);
}

TEST_CASE("sdpa plan: per-sequence lengths and ragged row starts from packed offsets") {
  const std::vector<int64_t> offsets = {0, 5, 5, 12};  // an empty sequence in the middle
  std::vector<int32_t> lengths(3);
  sdpa_lengths(offsets.data(), 3, lengths.data());
  CHECK(lengths == std::vector<int32_t>{5, 0, 7});
  std::vector<int64_t> rows(4);
  const int64_t H = 4, D = 8;
  sdpa_ragged_offsets(offsets.data(), 3, H * D, rows.data());
  CHECK(rows == std::vector<int64_t>{0, 5 * H * D, 5 * H * D, 12 * H * D});
  // Sequence s's first element is its first token's row: offsets[s] rows of H·D values.
  for (size_t s = 0; s < 3; ++s) CHECK(rows[s] == offsets[s] * H * D);
}

TEST_CASE(
    "sdpa plan: a paged key has a power-of-two table, the device's pool bound, one plan as tables grow") {
  const size_t h200 = size_t(141) << 30;
  const SdpaShapeKey k = sdpa_paged_key(16, 2, 256, 32, 32, 5, 64, h200, "decode");
  CHECK(k.pass == SdpaPass::paged_forward);
  CHECK(k.table_width == 8);
  CHECK(k.max_kv == 8 * 64);
  CHECK(k.block_size == 64);
  // The pool bound: blocks of 64 tokens × 2 heads × 256 values × 2 bytes that fit in the memory.
  CHECK(k.pool_blocks == int64_t(h200 / (64 * 2 * 256 * 2)));
  // Tables of 5 to 8 columns share the plan; 9 columns need the next width.
  for (int64_t columns : {6, 7, 8}) CHECK(sdpa_paged_key(16, 2, 256, 32, 32, columns, 64, h200, "d") == k);
  CHECK(sdpa_paged_key(16, 2, 256, 32, 32, 9, 64, h200, "d").table_width == 16);
  CHECK_FALSE(sdpa_paged_key(16, 2, 256, 32, 32, 5, 16, h200, "d") == k);  // another block size
  CHECK_FALSE(sdpa_shape_key(SdpaPass::forward, 16, 2, 256, 32, 32, 512, "d") == k);
  CHECK_THAT(describe(k), Catch::Contains("blocks of 64 tokens, table width 8"));
  // A prefill of 4096 tokens over 8 sequences of at most 8 blocks: no sequence has more than 512
  // queries, since its queries are among its keys.
  CHECK(sdpa_paged_key(16, 2, 256, 8, 4096, 8, 64, h200, "prefill").max_q == 512);
  CHECK_THAT(error_of([&] { sdpa_paged_key(16, 2, 256, 1, 1, 0, 64, h200, "decode"); }),
             Catch::Contains("columns 0"));
}
