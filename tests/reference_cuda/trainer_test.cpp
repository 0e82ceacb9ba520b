// The qwen35_cpu trainer through the C ABI: GRPO steps improve the objective, masks behave as
// docs/benchmark.md §3 says, micro-batching does not change the step, state saves and reloads exactly.
#include <cmath>
#include <filesystem>

#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

namespace {

std::vector<int32_t> seq(int offset, int n) {
  std::vector<int32_t> s;
  for (int i = 0; i < n; ++i) s.push_back((offset + 7 * i) % 37);
  return s;
}

// Two prompts, two responses each, generation logprobs = the trainer's own (on-policy).
Batch fixed_batch(const Trainer& t, float a0 = 1.0f, float a1 = -1.0f) {
  Batch probe;
  probe.add(seq(1, 12), 4, a0);
  probe.add(seq(2, 15), 5, a1);
  probe.add(seq(3, 9), 3, a0);
  probe.add(seq(4, 11), 6, a1);
  std::vector<float> lp = compute_logprobs(t, probe);
  for (size_t i = 0; i < lp.size(); ++i) probe.gen_logprobs[i] = probe.loss_mask[i] ? lp[i] : 0.0f;
  return probe;
}

// Σ_i A_i Σ_t∈response logp(t): what the GRPO gradient ascends.
double objective(const Trainer& t, Batch& b) {
  std::vector<float> lp = compute_logprobs(t, b);
  double j = 0;
  for (size_t i = 0; i + 1 < b.offsets.size(); ++i)
    for (int64_t p = b.offsets[i]; p < b.offsets[i + 1]; ++p)
      if (b.loss_mask[p]) j += b.advantages[i] * lp[p];
  return j;
}

std::map<std::string, double> step(const Trainer& t, Batch& b, uint64_t* version = nullptr) {
  mlpt_train_step_args a{MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE, t.get(), b.get()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->train_step(&a), "train_step");
  std::map<std::string, double> m;
  for (size_t i = 0; i < a.out_num_metrics; ++i) m[std::string(a.out_metrics[i].name.data, a.out_metrics[i].name.size)] = a.out_metrics[i].value;
  if (version) *version = a.out_weight_version;
  return m;
}

std::vector<std::vector<float>> exported(const Trainer& t) {
  mlpt_export_weights_args ex{MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE, t.get()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->export_weights(&ex), "export_weights");
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < ex.out_num_tensors; ++i) {
    const DLTensor& d = ex.out_tensors[i].tensor;
    REQUIRE(d.dtype.code == kDLFloat);
    int64_t n = 1;
    for (int k = 0; k < d.ndim; ++k) n *= d.shape[k];
    out.emplace_back(static_cast<const float*>(d.data), static_cast<const float*>(d.data) + n);
  }
  return out;
}

// The largest difference between two trainers' exported weights.
double max_weight_diff(const Trainer& x, const Trainer& y) {
  auto a = exported(x), b = exported(y);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, static_cast<double>(std::fabs(a[i][j] - b[i][j])));
  return worst;
}

const char* kFastLr = R"("optimizer": {"lr": 0.003, "grad_clip": 1.0})";

}  // namespace

TEST_CASE("a few GRPO steps on a fixed batch raise the advantage-weighted logprob") {
  TempDir dir("tr_learn");
  Trainer t(settings(make_checkpoint(dir, "ck", 21), kFastLr));
  Batch b = fixed_batch(t);
  double j0 = objective(t, b), last = j0;
  uint64_t version = 0;
  for (int s = 0; s < 4; ++s) {
    auto m = step(t, b, &version);
    CHECK(m["tokens"] == 8 + 10 + 6 + 5);
    CHECK(m["grad_norm"] > 0);
    double j = objective(t, b);
    INFO("step " << s << ": objective " << last << " -> " << j << ", loss " << m["loss"]);
    CHECK(j > last);
    last = j;
    // Keep it on-policy so seq-mask-TIS keeps every sequence.
    std::vector<float> lp = compute_logprobs(t, b);
    for (size_t i = 0; i < lp.size(); ++i) b.gen_logprobs[i] = b.loss_mask[i] ? lp[i] : 0.0f;
  }
  CHECK(version == 4);
  CHECK(last - j0 > 1e-3);
}

TEST_CASE("the first step's loss and masks follow docs/benchmark.md §3") {
  TempDir dir("tr_masks");
  Trainer t(settings(make_checkpoint(dir, "ck", 22)));
  Batch b = fixed_batch(t);
  // On-policy: w = 1, loss = −Σ A_i n_i / N_tok.
  {
    Batch c = b;
    auto m = step(t, c);
    CHECK(m["loss"] == Approx(-(8.0 - 10.0 + 6.0 - 5.0) / 29.0).margin(1e-6));
    CHECK(m["tis_masked_sequences"] == 0);
    CHECK(m["importance_weight_mean"] == Approx(1.0).margin(1e-5));
  }
  Trainer t2(settings(make_checkpoint(dir, "ck2", 22)));
  Batch c = fixed_batch(t2);
  c.truncated[1] = 1;                                                        // overlong: out of loss and N_tok
  for (int64_t p = c.offsets[2]; p < c.offsets[3]; ++p) c.gen_logprobs[p] -= 0.01f;  // TIS: ratio ~1.01 > 1.002
  for (int64_t p = c.offsets[3]; p < c.offsets[4]; ++p)
    if (c.loss_mask[p]) c.gen_logprobs[p] -= 1.0f;                           // logprob error: e^1 > 2
  auto m = step(t2, c);
  CHECK(m["truncated_sequences"] == 1);
  CHECK(m["tis_masked_sequences"] == 1);
  CHECK(m["logprob_error_masked_sequences"] == 1);
  CHECK(m["tokens"] == 8 + 6);  // sequences 0 and 2 (TIS-masked still counts)
  CHECK(m["loss"] == Approx(-8.0 / 14.0).margin(1e-5));
}

TEST_CASE("micro-batching and gradient accumulation do not change the step") {
  TempDir dir("tr_micro");
  std::string ck = make_checkpoint(dir, "ck", 23);
  Trainer whole(settings(ck, kFastLr)), parts(settings(ck, std::string(kFastLr) + R"(, "micro_batch_tokens": 16)"));
  Batch b = fixed_batch(whole), c = b;
  auto mw = step(whole, b), mp = step(parts, c);
  CHECK(mp["micro_batches"] == 4);
  CHECK(mw["micro_batches"] == 1);
  CHECK(mp["loss"] == Approx(mw["loss"]).epsilon(1e-6));
  CHECK(mp["grad_norm"] == Approx(mw["grad_norm"]).epsilon(1e-5));
  double worst = max_weight_diff(whole, parts);
  // Adam normalises each update to about lr = 3e-3 per element, so fp32 rounding of the gradient
  // sums in another order moves a weight by a small fraction of that; a real accumulation bug
  // (a micro-batch dropped or double-counted) moves weights by O(lr).
  CHECK(worst < 1e-5);
}

TEST_CASE("sequences with zero advantage skip the backward and the step is unchanged") {
  TempDir dir("tr_zero_adv");
  std::string ck = make_checkpoint(dir, "ck", 24);
  // Sequences 1 and 3 have A = 0 (an all-equal group): their backward is skipped. The reference
  // runs it with A = 1e-30, a coefficient that rounds the gradient contribution to nothing.
  Trainer skipped(settings(ck, kFastLr)), full(settings(ck, kFastLr));
  Batch b = fixed_batch(skipped, 1.0f, 0.0f), c = fixed_batch(full, 1.0f, 1e-30f);
  auto ms = step(skipped, b), mf = step(full, c);
  CHECK(ms["tokens"] == mf["tokens"]);  // zero-advantage sequences still count in N_tok
  CHECK(ms["loss"] == Approx(mf["loss"]).epsilon(1e-6));
  CHECK(ms["grad_norm"] == Approx(mf["grad_norm"]).epsilon(1e-5));
  CHECK(ms["forward_tokens"] == 12 + 15 + 9 + 11);
  CHECK(mf["backward_tokens"] == 12 + 15 + 9 + 11);
  CHECK(ms["backward_tokens"] == 12 + 9);
  CHECK(ms["head_rows"] == 8 + 10 + 6 + 5);  // only rows whose next token is scored (not the prompts)
  double worst = max_weight_diff(skipped, full);
  // Adam steps of ~lr = 3e-3: a missed contribution would show at O(lr). The two backwards sum the
  // same gradients in another order (other micro-batch contents), and where a gradient is a sum
  // that cancels to near Adam's eps its fp32 rounding moves the step by up to ~lr · 1e-3: 1.3e-6
  // with OpenBLAS's Haswell and Zen kernels, under 1e-6 with SkylakeX's. Bound lr / 30.
  CHECK(worst < 1e-4);

  // A whole batch of zero advantages: no backward at all, and AdamW still steps.
  Trainer idle(settings(ck, kFastLr));
  Batch z = fixed_batch(idle, 0.0f, 0.0f);
  uint64_t version = 0;
  auto mz = step(idle, z, &version);
  CHECK(mz["backward_tokens"] == 0);
  CHECK(mz["grad_norm"] == 0);
  CHECK(version == 1);
}

TEST_CASE("a group's shared prompt is computed once and the step equals the unshared one") {
  TempDir dir("tr_prefix");
  std::string ck = make_checkpoint(dir, "ck", 25);
  Trainer shared(settings(ck, kFastLr)), whole(settings(ck, std::string(kFastLr) + R"(, "share_prefixes": false)"));
  auto with = [](std::vector<int32_t> prompt, const std::vector<int32_t>& response) {
    prompt.insert(prompt.end(), response.begin(), response.end());
    return prompt;
  };
  const std::vector<int32_t> pa = seq(5, 70), pb = seq(6, 40);
  Batch b;
  // A group that trains: a 70-token prompt (two GDN chunks) and four responses; rows 0..68 are
  // never scored, so 69 tokens are shared.
  const float adv[] = {1.0f, -1.0f, 0.5f, -0.5f};
  for (int i = 0; i < 4; ++i) b.add(with(pa, seq(10 + i, 3 + 2 * i)), pa.size(), adv[i]);
  // An all-equal group (zero advantages, forward only), one member exactly its 39 shared tokens.
  b.add(with(pb, seq(20, 4)), pb.size(), 0.0f);
  b.add(std::vector<int32_t>(pb.begin(), pb.begin() + 39), 39, 0.0f);
  b.add(with(pb, seq(21, 7)), pb.size(), 0.0f);
  // A sequence that shares nothing.
  b.add(with(seq(7, 20), seq(22, 5)), 20, 1.0f);
  std::vector<float> lp = compute_logprobs(whole, b);
  for (size_t i = 0; i < lp.size(); ++i) b.gen_logprobs[i] = b.loss_mask[i] ? lp[i] : 0.0f;
  Batch c = b;
  auto ms = step(shared, b), mw = step(whole, c);
  const double all = static_cast<double>(b.tokens.size()), saved = 3 * 69 + 2 * 39;
  CHECK(mw["forward_tokens"] == all);
  CHECK(mw["shared_prefix_tokens"] == 0);
  CHECK(ms["shared_prefix_tokens"] == saved);
  CHECK(ms["forward_tokens"] == all - saved);
  CHECK(ms["backward_tokens"] == mw["backward_tokens"] - 3 * 69);
  CHECK(ms["head_rows"] == mw["head_rows"]);
  CHECK(ms["tokens"] == mw["tokens"]);
  CHECK(ms["tis_masked_sequences"] == 0);
  CHECK(ms["loss"] == Approx(mw["loss"]).epsilon(1e-6));
  CHECK(ms["grad_norm"] == Approx(mw["grad_norm"]).epsilon(1e-5));
  double worst = max_weight_diff(shared, whole);
  // As for micro-batching: rounding moves a weight by a small fraction of lr = 3e-3; a gradient
  // lost at the fork (a member's contribution to the prompt's layers) would move it by O(lr).
  CHECK(worst < 1e-5);

  // A budget the first member alone overflows: the others still join while their own tokens fit.
  Trainer small(settings(ck, std::string(kFastLr) + R"(, "micro_batch_tokens": 60)"));
  Batch d = c;
  auto mm = step(small, d);
  CHECK(mm["shared_prefix_tokens"] == saved);
  CHECK(mm["loss"] == Approx(mw["loss"]).epsilon(1e-6));
}

TEST_CASE("the router stays frozen by default and trains when unfrozen") {
  TempDir dir("tr_router");
  std::string ck = make_checkpoint(dir, "ck", 24);
  Trainer frozen(settings(ck, kFastLr)), free(settings(ck, R"("optimizer": {"lr": 0.003, "freeze_router": false})"));
  auto before = exported(frozen);
  Batch b = fixed_batch(frozen), c = b;
  step(frozen, b);
  step(free, c);
  mlpt_export_weights_args ex{MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE, frozen.get()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->export_weights(&ex), "export_weights");
  std::vector<std::string> names;  // copied: the next export invalidates the tensors
  for (size_t i = 0; i < ex.out_num_tensors; ++i) names.emplace_back(ex.out_tensors[i].name.data, ex.out_tensors[i].name.size);
  auto after = exported(frozen), after_free = exported(free);
  int routers = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    bool router = name.size() > 16 && name.substr(name.size() - 16) == ".mlp.gate.weight";
    INFO(name);
    if (router) {
      ++routers;
      CHECK(after[i] == before[i]);
      CHECK(after_free[i] != before[i]);
    } else if (name == "lm_head.weight") {
      CHECK(after[i] != before[i]);
    }
  }
  CHECK(routers == 4);
}

TEST_CASE("save_state / load_state restore weights, moments, step and version exactly") {
  TempDir dir("tr_state");
  Trainer t(settings(make_checkpoint(dir, "ck", 25), kFastLr));
  Batch b = fixed_batch(t);
  step(t, b);
  std::string state = dir / "state";
  mlpt_trainer_state_args s{MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE, t.get(), {state.data(), state.size()}};
  mlpt::plugin::check(loaded().trainer, loaded().t()->save_state(&s), "save_state");
  mlpt::plugin::check(loaded().trainer, loaded().t()->save_state(&s), "save_state (over the old one)");
  CHECK(std::filesystem::exists(state + "/optimizer/model.safetensors.index.json"));
  auto after1 = exported(t);
  std::vector<float> lp1 = compute_logprobs(t, b);
  uint64_t v2 = 0;
  step(t, b, &v2);
  auto after2 = exported(t);

  mlpt::plugin::check(loaded().trainer, loaded().t()->load_state(&s), "load_state");
  CHECK(exported(t) == after1);
  CHECK(compute_logprobs(t, b) == lp1);  // identical logits
  uint64_t v2b = 0;
  step(t, b, &v2b);
  CHECK(v2b == v2);
  CHECK(exported(t) == after2);  // moments came back too

  // The saved state is also a checkpoint an engine or a new trainer can start from.
  Trainer fresh(settings(state));
  CHECK(compute_logprobs(fresh, b) == lp1);

  // Corrupt or foreign states are refused and change nothing.
  mlpt_test::write_bytes(state + "/trainer_state.json", "{ not json");
  try {
    mlpt::plugin::check(loaded().trainer, loaded().t()->load_state(&s), "load_state");
    FAIL("corrupt state must be refused");
  } catch (const mlpt::Error& e) {
    CHECK(e.code() == MLPT_DATA_LOSS);
  }
  CHECK(exported(t) == after2);
  std::string other = make_checkpoint(dir, "other", 1, mlpt_test::micro_config_json(41));
  Trainer t41(settings(other));
  std::string state41 = dir / "state41";
  mlpt_trainer_state_args s41{MLPT_TRAINER_STATE_ARGS_STRUCT_SIZE, t41.get(), {state41.data(), state41.size()}};
  mlpt::plugin::check(loaded().trainer, loaded().t()->save_state(&s41), "save_state");
  s41.trainer = t.get();
  try {
    mlpt::plugin::check(loaded().trainer, loaded().t()->load_state(&s41), "load_state");
    FAIL("a state of another model must be refused");
  } catch (const mlpt::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("saved for another model"));
  }
  CHECK(exported(t) == after2);
}

TEST_CASE("trainer settings are checked with the key named") {
  TempDir dir("tr_errors");
  std::string ck = make_checkpoint(dir, "ck", 26);
  CHECK_THAT(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("lr": 1)")), Catch::Contains("unknown key 'lr'"));
  CHECK_THAT(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("optimizer": {"learning_rate": 1})")),
             Catch::Contains("unknown key 'optimizer.learning_rate'"));
  CHECK_THAT(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("loss": {"kl_coef": 0.1})")),
             Catch::Contains("loss.kl_coef: only 0 is supported"));
  CHECK_THAT(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("optimizer": {"betas": [0.9]})")),
             Catch::Contains("optimizer.betas"));
  CHECK_THAT(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("loss": {"tis_min": 2, "tis_max": 1})")),
             Catch::Contains("tis_min"));
  CHECK(create_error(MLPT_COMPONENT_TRAINER, settings(ck, R"("loss": {"ppo_clip": true, "tis_min": 0.5, "tis_max": 2.0}, "optimizer": {"lr": 1e-6, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "grad_clip": 0.125, "freeze_router": true}, "threads": 1, "micro_batch_tokens": 4096)")).empty());
  Trainer t(settings(ck));
  Batch b = fixed_batch(t);
  b.advantages[0] = NAN;
  mlpt_train_step_args a{MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE, t.get(), b.get()};
  CHECK_THROWS_WITH(mlpt::plugin::check(loaded().trainer, loaded().t()->train_step(&a), "train_step"),
                    Catch::Contains("advantage of sequence 0 is not finite"));
}

TEST_CASE("data parallel: a batch split over two trainers with the global token count sums to one trainer's gradient") {
  // lr 1, eps 1, betas 0 and no clipping make each update an invertible function of its gradient:
  // Δ = g / (|g| + 1), so g = Δ / (1 − |Δ|). Two ranks that each normalise by the global N_tok
  // must produce gradients that add up to the gradient of the whole batch on one trainer.
  TempDir dir("tr_dp");
  std::string ck = make_checkpoint(dir, "ck", 24);
  const char* linear = R"("optimizer": {"lr": 1.0, "eps": 1.0, "betas": [0.0, 0.0], "grad_clip": 0})";
  Trainer whole(settings(ck, linear)), rank0(settings(ck, linear)), rank1(settings(ck, linear));
  Batch full = fixed_batch(whole);
  auto initial = exported(whole);
  // Each rank's share: two of the four sequences, with the generation logprobs of the full batch.
  auto share = [&](size_t first) {
    Batch s;
    for (size_t i = first; i < first + 2; ++i) {
      int64_t b = full.offsets[i], e = full.offsets[i + 1];
      s.offsets.push_back(s.offsets.back() + (e - b));
      s.tokens.insert(s.tokens.end(), full.tokens.begin() + b, full.tokens.begin() + e);
      s.loss_mask.insert(s.loss_mask.end(), full.loss_mask.begin() + b, full.loss_mask.begin() + e);
      s.gen_logprobs.insert(s.gen_logprobs.end(), full.gen_logprobs.begin() + b, full.gen_logprobs.begin() + e);
      s.advantages.push_back(full.advantages[i]);
      s.truncated.push_back(0);
    }
    return s;
  };
  Batch s0 = share(0), s1 = share(2);
  auto step_share = [&](const Trainer& t, Batch& b, int64_t global) {
    mlpt_train_step_args a{};
    a.struct_size = MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE;
    a.trainer = t.get();
    a.batch = b.get();
    a.global_num_loss_tokens = global;
    mlpt::plugin::check(loaded().trainer, loaded().t()->train_step(&a), "train_step");
  };
  const int64_t n_tok = 8 + 10 + 6 + 5;
  step(whole, full);
  step_share(rank0, s0, n_tok);
  step_share(rank1, s1, n_tok);
  auto w = exported(whole), r0 = exported(rank0), r1 = exported(rank1);
  auto grad = [](float after, float before) {
    double d = static_cast<double>(before) - static_cast<double>(after);  // Adam steps against g
    return d / (1.0 - std::fabs(d));
  };
  double worst = 0, largest = 0;
  for (size_t i = 0; i < w.size(); ++i)
    for (size_t j = 0; j < w[i].size(); ++j) {
      double g = grad(w[i][j], initial[i][j]);
      double g_sum = grad(r0[i][j], initial[i][j]) + grad(r1[i][j], initial[i][j]);
      worst = std::max(worst, std::fabs(g - g_sum));
      largest = std::max(largest, std::fabs(g));
    }
  INFO("largest gradient element " << largest << ", worst difference " << worst);
  REQUIRE(largest > 1e-4);
  // fp32 weights hold Δ to about 1e-7 absolute; a rank normalising by its own count instead of the
  // global one would be off by the size of its whole contribution (about 100% of g).
  CHECK(worst < 2e-3 * largest + 1e-6);

  // The control: the same split where each rank normalises by its own count is visibly wrong.
  Trainer local0(settings(ck, linear)), local1(settings(ck, linear));
  Batch l0 = share(0), l1 = share(2);
  step_share(local0, l0, 0);
  step_share(local1, l1, 0);
  auto q0 = exported(local0), q1 = exported(local1);
  double local_worst = 0;
  for (size_t i = 0; i < w.size(); ++i)
    for (size_t j = 0; j < w[i].size(); ++j)
      local_worst = std::max(local_worst, std::fabs(grad(w[i][j], initial[i][j]) -
                                                    (grad(q0[i][j], initial[i][j]) + grad(q1[i][j], initial[i][j]))));
  CHECK(local_worst > 0.1 * largest);

  // A global count smaller than a rank's own share is refused, naming the field.
  Trainer bad(settings(ck, linear));
  Batch s2 = share(0);
  mlpt_train_step_args a{};
  a.struct_size = MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE;
  a.trainer = bad.get();
  a.batch = s2.get();
  a.global_num_loss_tokens = 3;
  CHECK_THROWS_WITH(mlpt::plugin::check(loaded().trainer, loaded().t()->train_step(&a), "train_step"),
                    Catch::Contains("global_num_loss_tokens 3"));
}
