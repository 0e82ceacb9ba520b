// The qwen35_cuda trainer component against qwen35_cpu on the same checkpoint and batch: logprobs,
// the first GRPO step's loss and gradient norm, learning over a few steps, weights exported as
// CUDA tensors, and states the CPU trainer can load.
//
// Tolerances, stated: logprobs within 0.05 (bf16 activations, as model_test); on-policy losses
// equal to 1e-5 (both −Σ A·n/N_tok); gradient norms within 10% (bf16 activation gradients).
#include <catch2/catch.hpp>

#include <cmath>

#include "backends/cuda/components/trainer.hpp"
#include "gpu_model_fixtures.hpp"
#include "trainer/trainer.hpp"

using namespace cuda_testing;

namespace {

// Four sequences of prompt + response; advantages ±1; generation logprobs filled per trainer.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> gen, adv;
  mlpt_train_batch view{};
  Batch() {
    std::mt19937_64 rng(5);
    for (auto [len, resp, a] : std::vector<std::tuple<int, int, float>>{{30, 8, 1}, {50, 12, -1}, {20, 5, 1},
                                                                       {70, 20, -1}}) {
      for (int i = 0; i < len; ++i) {
        tokens.push_back(static_cast<int32_t>(rng() % 300));
        loss_mask.push_back(i >= len - resp);
      }
      offsets.push_back(static_cast<int64_t>(tokens.size()));
      truncated.push_back(0);
      adv.push_back(a);
    }
    gen.assign(tokens.size(), 0.f);
  }
  mlpt_train_batch* get() {
    view = mlpt_train_batch{};
    view.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    view.tokens = tokens.data();
    view.offsets = offsets.data();
    view.num_sequences = offsets.size() - 1;
    view.loss_mask = loss_mask.data();
    view.generation_logprobs = gen.data();
    view.advantages = adv.data();
    view.truncated = truncated.data();
    return &view;
  }
};

std::vector<float> logprobs(mlpt::sdk::Trainer& t, Batch& b) {
  std::vector<float> out(b.tokens.size());
  mlpt_compute_logprobs_args a{};
  a.struct_size = MLPT_COMPUTE_LOGPROBS_ARGS_STRUCT_SIZE;
  a.batch = b.get();
  a.out_logprobs = out.data();
  t.compute_logprobs(a);
  return out;
}
void on_policy(mlpt::sdk::Trainer& t, Batch& b) {
  auto lp = logprobs(t, b);
  for (size_t i = 0; i < lp.size(); ++i) b.gen[i] = b.loss_mask[i] ? lp[i] : 0.f;
}
std::map<std::string, double> step(mlpt::sdk::Trainer& t, Batch& b) {
  mlpt_train_step_args a{};
  a.struct_size = MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE;
  a.batch = b.get();
  t.train_step(a);
  std::map<std::string, double> m;
  for (size_t i = 0; i < a.out_num_metrics; ++i)
    m[std::string(a.out_metrics[i].name.data, a.out_metrics[i].name.size)] = a.out_metrics[i].value;
  return m;
}
double objective(mlpt::sdk::Trainer& t, Batch& b) {
  auto lp = logprobs(t, b);
  double j = 0;
  for (size_t s = 0; s + 1 < b.offsets.size(); ++s)
    for (int64_t p = b.offsets[s]; p < b.offsets[s + 1]; ++p)
      if (b.loss_mask[p]) j += b.adv[s] * lp[p];
  return j;
}

}  // namespace

TEST_CASE("qwen35_cuda trainer: logprobs, first step, learning, CUDA export and states match qwen35_cpu") {
  REQUIRE(have_gpu());
  TempDir dir("cuda_trainer_test");
  const auto cfg = small_config();
  const Weights<float> w = bf16_exact_weights(cfg, 11);
  mlpt::ref::save_checkpoint((dir.path / "ck").string(), w, mlpt::ref::Dtype::f32);
  const std::string settings = R"({"checkpoint": ")" + (dir.path / "ck").string() +
                               R"(", "micro_batch_tokens": 100, "optimizer": {"lr": 0.003, "grad_clip": 1.0}})";
  mlpt::ref::ReferenceTrainer cpu(settings, nullptr);  // one rank, no group
  mlpt::ref::cuda::CudaTrainer gpu(settings);

  Batch bc, bg;
  const auto lc = logprobs(cpu, bc), lg = logprobs(gpu, bg);
  double worst = 0;
  for (size_t i = 0; i < lc.size(); ++i) worst = std::max(worst, std::fabs(double(lc[i]) - lg[i]));
  INFO("max |Δ logprob| " << worst);
  CHECK(worst < 0.05);

  // Weights exported before any step are the checkpoint's, in device memory.
  mlpt_export_weights_args ex{};
  ex.struct_size = MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE;
  gpu.export_weights(ex);
  REQUIRE(ex.out_num_tensors == w.values.size());
  for (size_t i = 0; i < ex.out_num_tensors; ++i) {
    const DLTensor& d = ex.out_tensors[i].tensor;
    CHECK(d.device.device_type == kDLCUDA);
    std::vector<float> h(w.values[i].size());
    check(cudaMemcpy(h.data(), d.data, h.size() * 4, cudaMemcpyDeviceToHost), "test: export");
    CHECK(h == w.values[i]);
  }

  on_policy(cpu, bc);
  on_policy(gpu, bg);
  auto mc = step(cpu, bc), mg = step(gpu, bg);
  INFO("loss cpu " << mc["loss"] << " gpu " << mg["loss"] << "; grad_norm cpu " << mc["grad_norm"] << " gpu "
                   << mg["grad_norm"]);
  CHECK(mg["loss"] == Approx(mc["loss"]).margin(1e-5));
  CHECK(mg["tokens"] == mc["tokens"]);
  CHECK(mg["micro_batches"] == mc["micro_batches"]);
  CHECK(std::fabs(mg["grad_norm"] - mc["grad_norm"]) < 0.1 * mc["grad_norm"]);

  double last = objective(gpu, bg);
  const double first = last;
  for (int s = 0; s < 3; ++s) {
    on_policy(gpu, bg);
    step(gpu, bg);
    const double j = objective(gpu, bg);
    INFO("step " << s << ": objective " << last << " -> " << j);
    CHECK(j > last);
    last = j;
  }
  CHECK(last - first > 1e-3);

  // A state saved by the CUDA trainer loads into the CPU trainer and scores alike.
  gpu.save_state((dir.path / "state").string());
  cpu.load_state((dir.path / "state").string());
  const auto lc2 = logprobs(cpu, bc), lg2 = logprobs(gpu, bg);
  worst = 0;
  for (size_t i = 0; i < lc2.size(); ++i) worst = std::max(worst, std::fabs(double(lc2[i]) - lg2[i]));
  INFO("after load_state: max |Δ logprob| " << worst);
  CHECK(worst < 0.05);
}
