// The GRPO loss plan and the per-token loss/gradient, against hand-computed values (docs/benchmark.md §3).
#include <catch2/catch.hpp>

#include <cmath>

#include "trainer/grpo_loss.hpp"

using namespace mlpt::ref;

namespace {
struct Fixture {
  std::vector<int64_t> offsets{0, 4, 7};
  std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7};
  std::vector<uint8_t> mask{1, 0, 1, 1, 0, 1, 1};  // the first token of a sequence never trains
  std::vector<float> gen{0, 0, -1.0f, -2.0f, 0, -0.5f, -0.25f};
  std::vector<float> adv{2.0f, -1.0f};
  std::vector<uint8_t> truncated{0, 0};
  mlpt_train_batch batch() {
    mlpt_train_batch b{};
    b.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    b.num_sequences = 2;
    b.offsets = offsets.data();
    b.tokens = tokens.data();
    b.loss_mask = mask.data();
    b.generation_logprobs = gen.data();
    b.advantages = adv.data();
    b.truncated = truncated.data();
    return b;
  }
};
}  // namespace

TEST_CASE("loss plan: importance weights, N_tok, and the three masks") {
  Fixture f;
  std::vector<double> prev{0, 0, -1.0005, -2.0, 0, -0.5, -0.25};
  mlpt_train_batch b = f.batch();
  LossPlan p = plan_loss(b, prev, LossSettings{});
  CHECK(p.num_tokens == 4);
  CHECK(p.weight[0] == 0.0);
  CHECK(p.weight[1] == 0.0);
  CHECK(p.weight[2] == Approx(2.0 * std::exp(-0.0005) / 4));
  CHECK(p.weight[3] == Approx(2.0 / 4));
  CHECK(p.weight[5] == Approx(-1.0 / 4));
  CHECK(p.tis_masked == 0);

  // geometric-mean ratio of sequence 0 = exp(-0.0005/2) ~ 0.99975 < 0.999? no; push it below.
  prev[2] = -1.01;
  p = plan_loss(b, prev, LossSettings{});
  CHECK(p.tis_masked == 1);
  CHECK(p.weight[2] == 0.0);
  CHECK(p.weight[3] == 0.0);
  CHECK(p.num_tokens == 4);  // TIS-masked sequences still count

  prev[2] = -3.0;  // mean exp(|diff|) = (e^2 + 1)/2 > 2: out of the loss and of N_tok
  p = plan_loss(b, prev, LossSettings{});
  CHECK(p.logprob_error_masked == 1);
  CHECK(p.num_tokens == 2);
  CHECK(p.weight[5] == Approx(-1.0 / 2));

  f.truncated[1] = 1;
  b = f.batch();
  p = plan_loss(b, prev, LossSettings{});
  CHECK(p.truncated == 1);
  CHECK(p.num_tokens == 0);
  for (double w : p.weight) CHECK(w == 0.0);
}

TEST_CASE("token loss: ratio 1 gives −weight, PPO clipping stops the gradient outside the band") {
  LossSettings s;
  TokenLoss t = token_loss(0.5, -1.0, -1.0, s);
  CHECK(t.loss == Approx(-0.5));
  CHECK(t.grad == Approx(-0.5));
  s.ppo_clip = true;
  t = token_loss(0.5, -1.0, -1.0, s);  // ratio 1: inside the band, same as unclipped
  CHECK(t.grad == Approx(-0.5));
  t = token_loss(0.5, -1.0 + std::log(1.5), -1.0, s);  // A > 0, ratio 1.5 > 1.28: clipped
  CHECK(t.grad == 0.0);
  CHECK(t.loss == Approx(-0.5 * 1.28));
  t = token_loss(-0.5, -1.0 + std::log(1.5), -1.0, s);  // A < 0, ratio high: unclipped branch is the min
  CHECK(t.grad == Approx(0.5 * 1.5));
  t = token_loss(-0.5, -1.0 + std::log(0.5), -1.0, s);  // A < 0, ratio 0.5 < 0.8: clipped
  CHECK(t.grad == 0.0);
  CHECK(token_loss(0.0, -3.0, -1.0, s).grad == 0.0);
}
