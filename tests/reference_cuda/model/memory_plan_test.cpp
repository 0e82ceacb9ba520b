// The 397B config and the per-GPU memory plan: parameter counts against the spec's hand count,
// the reference placement (docs/benchmark.md §7) fitting 288 GiB GPUs, layouts that cannot work, and the
// refit time model built on the same placement.
#include <catch2/catch.hpp>

#include "model/memory_plan.hpp"
#include "model/refit_model.hpp"
#include "mlpt/sdk/error.hpp"

using namespace mlpt::ref;

namespace {

ModelConfig qwen35_397b() { return load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/qwen35-397b/config.json"); }

PlanRequest reference_placement(double gpu_bytes) {
  PlanRequest r;
  r.trainer = parse_parallel_layout("tp4,pp2,ep32");
  r.engine = parse_parallel_layout("tp8,ep8");
  r.nodes = 64;
  r.trainer_nodes = 16;
  r.gpus_per_node = 4;
  r.gpu_bytes = gpu_bytes;
  return r;
}

}  // namespace

TEST_CASE("the 397B config counts ~397B parameters, ~17B active, as the spec's hand count") {
  ModelConfig c = qwen35_397b();
  ParameterCount n = count_parameters(c);
  CHECK(n.routed_experts == int64_t{60} * 512 * 3 * 4096 * 1024);  // 386.5B (docs/qwen35-architecture.md §1)
  CHECK(n.vocabulary == int64_t{2} * 248320 * 4096);
  CHECK(n.total == parameter_count(c));  // the tensor list agrees with config.cpp's closed formula
  CHECK(n.total > int64_t{394} * 1000 * 1000 * 1000);
  CHECK(n.total < int64_t{398} * 1000 * 1000 * 1000);
  CHECK(n.active_per_token() > int64_t{165} * 100 * 1000 * 1000);
  CHECK(n.active_per_token() < int64_t{180} * 100 * 1000 * 1000);
  CHECK(c.num_attention_layers() == 15);
}

TEST_CASE("the reference placement fits 4 x GB300 nodes (288 GiB) and not 80 GiB GPUs") {
  ModelConfig c = qwen35_397b();
  const double GiB = double(1ull << 30);
  MemoryPlan p = plan_memory(c, reference_placement(288 * GiB));
  CHECK(p.trainer.world == 64);
  CHECK(p.trainer.dp == 8);
  CHECK(p.trainer.expert_dp == 1);
  // Each training GPU holds 1/64 of the routed experts (ep32 x pp2) in bf16, at least.
  CHECK(p.trainer.weights * 64 >= 2.0 * static_cast<double>(p.params.routed_experts));
  CHECK(p.trainer.gradients == 2 * p.trainer.weights);  // fp32 main gradients of bf16 weights
  CHECK(p.trainer_fits);
  CHECK(p.engine.replicas == 24);  // 48 generation nodes x 4 GPUs / 8
  CHECK(p.engine.gpus_per_replica == 8);
  // Engine weights: the whole model over 8 GPUs in bf16.
  CHECK(p.engine.weights == Approx(2.0 * static_cast<double>(p.params.total) / 8).epsilon(1e-9));
  // Spec §4: KV 2 KiB per token per attention layer over 2 KV heads; TP8 leaves one head per GPU.
  CHECK(p.engine.kv_per_token == 15 * 1024);
  // Spec §4: GDN state 4 MiB per layer (fp32 [64, 128, 128]) over 8 GPUs, plus the conv window.
  CHECK(p.engine.gdn_state_per_session == 45.0 * (4.0 * (1 << 20) / 8 + 12288 / 8 * 3 * 2));
  CHECK(p.engine_fits);
  CHECK(p.engine.sessions_per_replica > 10);
  std::string report = format_plan(c, reference_placement(288 * GiB), p);
  CHECK_THAT(report, Catch::Contains("plan fits"));
  CHECK_THAT(report, Catch::Contains("activations"));

  MemoryPlan small = plan_memory(c, reference_placement(80 * GiB));
  CHECK_FALSE(small.trainer_fits);
  CHECK_THAT(format_plan(c, reference_placement(80 * GiB), small), Catch::Contains("DOES NOT FIT"));
}

TEST_CASE("layouts that do not divide the model or the GPUs are refused, naming what") {
  ModelConfig c = qwen35_397b();
  auto error = [&](PlanRequest r) -> std::string {
    try {
      plan_memory(c, r);
    } catch (const mlpt::sdk::Error& e) {
      return e.what();
    }
    FAIL("expected an error");
    return {};
  };
  PlanRequest r = reference_placement(288.0 * (1ull << 30));
  r.trainer = parse_parallel_layout("tp4,pp7,ep32");
  CHECK_THAT(error(r), Catch::Contains("tp x pp"));
  r.trainer = parse_parallel_layout("tp4,pp2,ep3");
  CHECK_THAT(error(r), Catch::Contains("ep x pp"));
  r.trainer = parse_parallel_layout("tp4,pp2,ep32");
  r.engine = parse_parallel_layout("tp64");
  CHECK_THAT(error(r), Catch::Contains("tp of num_attention_heads"));
  for (const char* bad : {"tp4,tp2", "xp4", "tp", "tp0", "tp4;pp2"})
    CHECK_THROWS_WITH(parse_parallel_layout(bad), Catch::Contains("is not one of tpN, ppN, epN"));
  CHECK(parse_bytes("288GiB") == 288.0 * (1ull << 30));
  CHECK(parse_bytes("80GB") == 80e9);
  CHECK_THROWS_WITH(parse_bytes("lots"), Catch::Contains("not a memory size"));
}

TEST_CASE("the refit model: sparse bytes per element by the smallest form, dense vs sparse time at 397B") {
  CHECK(sparse_bytes_per_element(0) == 0);
  CHECK(sparse_bytes_per_element(0.01) == Approx(0.01 * 3));      // 1-byte gaps + 2-byte values
  CHECK(sparse_bytes_per_element(1e-4) == Approx(1e-4 * 4));      // gaps of ~10^4 take 2 LEB128 bytes
  CHECK(sparse_bytes_per_element(0.5) == Approx(0.125 + 1.0));    // the bitmap wins
  CHECK(sparse_bytes_per_element(1.0) == 2.0);                    // dense
  CHECK_THROWS_WITH(sparse_bytes_per_element(1.5), Catch::Contains("[0, 1]"));
  ModelConfig c = qwen35_397b();
  PlanRequest r = reference_placement(1e30);
  RefitLinks links;  // 100 GB/s network, 900 GB/s NVLink, 8 TB/s HBM per GPU
  RefitTime dense = refit_time(c, r, links, -1), sparse = refit_time(c, r, links, 0.01);
  // Dense: each engine GPU takes its whole shard over the network once.
  CHECK(dense.network_s == Approx(dense.engine_shard_bytes / links.network_bytes_per_s));
  CHECK(dense.total_s() > 1.0);
  CHECK(sparse.wire_fraction == Approx(0.015));
  CHECK(sparse.total_s() < 0.1 * dense.total_s());
  CHECK_THAT(format_refit(c, r, links, 0.01), Catch::Contains("meets the 1 s goal"));
}
