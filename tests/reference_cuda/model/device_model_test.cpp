// The device model (device_model/, the code the GPU runs) on the CPU with bf16 storage emulated
// (backends/cpu/bf16_ops.hpp) against the fp32 reference model (model/model.hpp): the host logic
// (bf16 rounding, uploads, batch plans) exactly, and the whole forward, backward and decode within
// bounds that follow from bf16's rounding (each bound's derivation is next to it).
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/model.hpp"
#include "device_model_checks.hpp"

using namespace model_testing;
using mlpt::ref::bf16;
using mlpt::ref::Buffer;
namespace dev = mlpt::ref::dev;

namespace {

// An independent rounding: the two bf16 neighbours of f by truncation, the nearer in double, ties
// to the even mantissa; above the largest bf16 by half an ulp or more, infinity.
uint16_t reference_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t lo = u & 0xffff0000u;
  const double dlo = double(std::bit_cast<float>(lo));
  const int exp = int((u >> 23) & 0xff);
  const double ulp = std::ldexp(1.0, (exp == 0 ? 1 : exp) - 127 - 7) * (f < 0 ? -1 : 1);
  const double dhi = dlo + ulp;  // may be 2^128: the overflow threshold rounds to infinity
  const double df = double(f);
  const double a = std::fabs(df - dlo), b = std::fabs(dhi - df);
  const bool up = b < a || (a == b && ((lo >> 16) & 1u));
  return uint16_t((up ? lo + 0x10000u : lo) >> 16);
}

}  // namespace

TEST_CASE("bf16: rounding to nearest even matches an independent rounding, specials kept") {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  int64_t checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(f)) continue;
    const uint16_t want = reference_bf16_bits(f);
    if (mlpt::ref::to_bf16(f).bits != want) {
      INFO("f = " << f << " bits " << std::hex << std::bit_cast<uint32_t>(f));
      REQUIRE(mlpt::ref::to_bf16(f).bits == want);
    }
    ++checked;
  }
  CHECK(checked > 190000);
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even 1.
  CHECK(mlpt::ref::to_bf16(1.0f + std::ldexp(1.0f, -8)).bits == mlpt::ref::to_bf16(1.0f).bits);
  CHECK(mlpt::ref::to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits ==
        uint16_t(mlpt::ref::to_bf16(1.0f).bits + 2));
  CHECK(std::isinf(mlpt::ref::round_bf16(std::numeric_limits<float>::max())));
  CHECK(std::isinf(mlpt::ref::round_bf16(-std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(mlpt::ref::round_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(
      std::isnan(mlpt::ref::round_bf16(std::bit_cast<float>(0x7f800001u))));  // a signalling NaN stays a NaN
  CHECK(mlpt::ref::round_bf16(-0.0f) == 0.0f);
  CHECK(std::signbit(mlpt::ref::round_bf16(-0.0f)));
}

TEST_CASE("device model: every uploaded tensor lands in its own place, as its bf16 rounding or exactly") {
  mlpt::ref::cpu::Bf16Ops ops;
  const ModelConfig cfg = small_config();
  const Weights<float> w = mlpt::ref::init_weights<float>(cfg, 17);  // not bf16-exact: rounding shows
  const dev::DeviceWeights d = dev::upload_weights(ops, w);
  REQUIRE(d.tensors.size() == w.values.size());
  for (size_t i = 0; i < w.values.size(); ++i) {
    INFO("tensor " << w.layout.tensors[i].name);
    const std::vector<float> back = dev::download_tensor(ops, d, static_cast<int>(i));
    REQUIRE(back.size() == w.values[i].size());
    const bool f32 = dev::is_fp32_tensor(w.layout, static_cast<int>(i));
    size_t wrong = 0;
    for (size_t j = 0; j < back.size(); ++j)
      wrong += back[j] != (f32 ? w.values[i][j] : mlpt::ref::round_bf16(w.values[i][j]));
    CHECK(wrong == 0);
  }
  // assign_tensor writes one tensor and no other.
  dev::DeviceWeights e = dev::upload_weights(ops, w);
  const int target = e.layout.layers[0].moe.router;
  std::vector<float> ones(w.values[size_t(target)].size(), 1.5f);
  Buffer src(ops, ones.size() * 4);
  ops.to_device(src.get(), ones.data(), ones.size() * 4);
  dev::assign_tensor(ops, e, target, src.as<float>());
  CHECK(dev::download_tensor(ops, e, target) == ones);
  CHECK(dev::download_tensor(ops, e, target - 1) == dev::download_tensor(ops, d, target - 1));
  // A checkpoint whose tensor sizes disagree with its layout is refused, naming the tensor.
  Weights<float> bad = w;
  bad.values[3].pop_back();
  CHECK_THROWS_WITH(dev::upload_weights(ops, bad), Catch::Contains(w.layout.tensors[3].name));
}

TEST_CASE("device model: a batch's plan (positions, block table, KV lengths) and its refusals") {
  mlpt::ref::cpu::Bf16Ops ops;
  const ModelConfig cfg = small_config();
  dev::KvCache kv(ops, cfg, 8, 4);
  dev::DeviceSequenceState a(ops, cfg), b(ops, cfg);
  a.length = 5, a.blocks = {3, 1};  // 5 done + 2 new = 7 <= 8
  b.length = 0, b.blocks = {6};
  dev::DeviceBatch batch;
  batch.tokens = {1, 2, 3};
  batch.offsets = {0, 2, 3};
  batch.states = {&a, &b};
  batch.kv = &kv;
  const dev::BatchPlan p = dev::plan_batch(cfg, batch);
  CHECK(p.has_states);
  CHECK(p.positions == std::vector<int64_t>{5, 6, 0});
  CHECK(p.kv_lengths == std::vector<int64_t>{7, 1});
  CHECK(p.max_blocks == 2);
  CHECK(p.block_table == std::vector<int32_t>{3, 1, 6, 0});

  SECTION("training batch: positions restart per segment") {
    dev::DeviceBatch t;
    t.tokens = {1, 2, 3, 4, 5};
    t.offsets = {0, 3, 3, 5};
    const dev::BatchPlan q = dev::plan_batch(cfg, t);
    CHECK_FALSE(q.has_states);
    CHECK(q.positions == std::vector<int64_t>{0, 1, 2, 0, 1});
  }
  SECTION("a segment without state among segments with states is an error, not a crash") {
    batch.states = {&a, nullptr};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, batch), Catch::Contains("segment 1 has none"));
  }
  SECTION("too few blocks for the new tokens") {
    a.blocks = {3};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, batch),
                      Catch::Contains("segment 0 has KV blocks for 4 tokens, needs 7"));
  }
  SECTION("a block outside the pool") {
    b.blocks = {8};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, batch), Catch::Contains("names KV block 8 of a pool of 8"));
  }
  SECTION("tokens, offsets and replayed experts are checked") {
    dev::DeviceBatch t;
    t.tokens = {1, 300};
    t.offsets = {0, 2};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, t), Catch::Contains("token 300 at position 1"));
    t.tokens = {1, 2};
    t.offsets = {0, 2, 1};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, t), Catch::Contains("offsets decrease at segment 1"));
    t.offsets = {0, 1};
    CHECK_THROWS_WITH(dev::plan_batch(cfg, t), Catch::Contains("2 tokens for offsets ending at 1"));
    t.offsets = {0, 2};
    std::vector<int16_t> replay(size_t(2 * cfg.num_layers * cfg.experts_per_token), 0);
    replay[5] = 8;
    t.replay_experts = replay.data();
    CHECK_THROWS_WITH(dev::plan_batch(cfg, t), Catch::Contains("expert 8 is outside [0, 8)"));
  }
}

TEST_CASE("device model (bf16 on the CPU) computes the fp32 reference's function within bf16's rounding") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_forward_against_reference(ops);
}

TEST_CASE("device model (bf16 on the CPU): the gradient is the fp32 reference's within bf16's rounding") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_gradient_against_reference(ops);
}

TEST_CASE("device model (bf16 on the CPU): prefill then decode with sequence state equals one full forward") {
  mlpt::ref::cpu::Bf16Ops ops;
  check_decode_equals_full_forward(ops);
}
