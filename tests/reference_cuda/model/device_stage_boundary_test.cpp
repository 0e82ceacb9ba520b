// The device model's pipeline stages with their boundary messages passed by the caller
// (dev::StageBoundary, as the trainer's 1F1B schedule passes them): two stages of one model in one
// process (bf16 emulated on the CPU), run in the 1F1B order of two micro-batches (stage 0: forward
// 0, forward 1, backward 0, backward 1, so its workspace serves a second forward before the first
// backward), give the hidden states and the gradients of the model on one rank bit for bit.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/model.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/weights.hpp"
#include "model_fixtures.hpp"
#include "stage_place.hpp"

namespace dev = mlpt::ref::dev;
using mlpt::ref::bf16;
using mlpt::ref::Buffer;
using mlpt::ref::Ops;
using mlpt_test::StagePlace;

namespace {

dev::DeviceBatch batch_of(const std::vector<int32_t>& tokens) {
  dev::DeviceBatch b;
  b.tokens = tokens;
  b.offsets = {0, static_cast<int64_t>(tokens.size())};
  return b;
}

std::vector<Buffer> zero_gradients(Ops& ops, const mlpt::ref::ModelLayout& layout) {
  std::vector<Buffer> grads;
  for (const auto& t : layout.tensors) {
    grads.emplace_back(ops, size_t(std::max<int64_t>(t.numel(), 1)) * 4);
    ops.zero(grads.back().get(), grads.back().bytes());
  }
  return grads;
}

std::vector<uint8_t> bytes_of(Ops& ops, const Buffer& b, size_t n) {
  std::vector<uint8_t> out(n);
  if (n) ops.to_host(out.data(), b.get(), n);
  return out;
}

}  // namespace

TEST_CASE(
    "device model: two pipeline stages passing their boundary through the caller in the 1F1B order are one "
    "rank bit for bit") {
  mlpt::ref::cpu::Bf16Ops ops;
  const mlpt::ref::ModelConfig cfg = mlpt_test::micro_config();  // four layers: two a stage
  const mlpt::ref::Weights<float> w = mlpt::ref::init_weights<float>(cfg, 29);
  const int64_t H = cfg.hidden_size;
  const std::vector<std::vector<int32_t>> micro_batches = {{3, 14, 15, 9, 26, 5, 35}, {8, 9, 7, 9, 3}};
  // d(hidden) of each micro-batch: fixed values, bf16 on the device.
  std::vector<Buffer> d_hidden;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    const int64_t n = static_cast<int64_t>(micro_batches[k].size()) * H;
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[size_t(i)] = 0.01f * float((i * 7 + int64_t(k) * 3) % 13) - 0.06f;
    Buffer wide(ops, size_t(n) * 4);
    ops.to_device(wide.get(), values.data(), size_t(n) * 4);
    d_hidden.emplace_back(ops, size_t(n) * 2);
    ops.to_bf16(n, wide.as<float>(), d_hidden.back().as<bf16>());
  }

  // One rank: forward and backward of each micro-batch in turn.
  const dev::DeviceWeights whole = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();
  std::vector<Buffer> whole_grads = zero_gradients(ops, w.layout);
  std::vector<std::vector<uint8_t>> whole_hidden;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    const dev::DeviceBatch b = batch_of(micro_batches[k]);
    std::vector<int16_t> experts(micro_batches[k].size() *
                                 size_t(cfg.num_moe_layers() * cfg.experts_per_token));
    dev::DeviceBatch recorded = b;
    recorded.routed_experts = experts.data();
    Buffer hidden, inputs;
    dev::forward_hidden(ops, whole, recorded, *ws, hidden, &inputs);
    whole_hidden.push_back(bytes_of(ops, hidden, micro_batches[k].size() * size_t(H) * 2));
    dev::backward(ops, whole, b, inputs, experts.data(), d_hidden[k].as<bf16>(), whole_grads, true, *ws);
  }

  // Two stages, each with its own workspace and group place, the caller passing the messages.
  struct Stage {
    mlpt::ref::Weights<float> w;
    dev::DeviceWeights d;
    StagePlace place;
    mlpt::ref::ModelParallel groups;
    dev::WorkspacePtr ws = dev::make_workspace();
    std::vector<Buffer> grads;
  };
  std::vector<std::unique_ptr<Stage>> stages;
  for (int s = 0; s < 2; ++s) {
    auto st = std::make_unique<Stage>(
        Stage{mlpt::ref::shard_weights(w, mlpt::ref::ModelShard::of_model_rank(1, 1, 2, s)),
              {},
              StagePlace(s, 2),
              {}});
    st->d = dev::upload_weights(ops, st->w);
    st->groups.pipeline = &st->place;
    st->grads = zero_gradients(ops, st->w.layout);
    stages.push_back(std::move(st));
  }
  struct InFlight {
    dev::DeviceBatch b;
    std::vector<int16_t> experts;
    Buffer inputs, hidden, output;  // output: fp32 [N, H], the stage's message
  };
  InFlight at0[2], at1[2];
  auto forward = [&](int s, size_t k, InFlight& f, const float* input) {
    Stage& st = *stages[size_t(s)];
    f.b = batch_of(micro_batches[k]);
    f.b.parallel = &st.groups;
    f.experts.assign(micro_batches[k].size() * size_t(cfg.num_moe_layers() * cfg.experts_per_token), 0);
    f.b.routed_experts = f.experts.data();
    f.output.reserve(ops, micro_batches[k].size() * size_t(H) * 4);
    const dev::StageBoundary boundary{input, s == 0 ? f.output.as<float>() : nullptr};
    f.b.boundary = &boundary;
    dev::forward_hidden(ops, st.d, f.b, *st.ws, f.hidden, &f.inputs);
    f.b.routed_experts = nullptr;
    f.b.boundary = nullptr;
  };
  auto backward = [&](int s, InFlight& f, const bf16* dh, const float* input) {
    Stage& st = *stages[size_t(s)];
    const dev::StageBoundary boundary{input, s == 1 ? f.output.as<float>() : nullptr};
    f.b.boundary = &boundary;
    dev::backward(ops, st.d, f.b, f.inputs, f.experts.data(), dh, st.grads, true, *st.ws);
  };
  // The experts a stage records are its own layers'; the one rank's record holds all of them. A
  // stage's record replays its own layers, so the ranks' records are not compared.
  forward(0, 0, at0[0], nullptr);
  forward(0, 1, at0[1], nullptr);                    // stage 0's warm-up runs one forward ahead
  forward(1, 0, at1[0], at0[0].output.as<float>());  // stage 1: forward 0
  backward(1, at1[0], d_hidden[0].as<bf16>(), nullptr);
  backward(0, at0[0], nullptr, at1[0].output.as<float>());  // d(stage 0's output) of micro-batch 0
  forward(1, 1, at1[1], at0[1].output.as<float>());
  backward(1, at1[1], d_hidden[1].as<bf16>(), nullptr);
  backward(0, at0[1], nullptr, at1[1].output.as<float>());

  for (size_t k = 0; k < micro_batches.size(); ++k) {
    INFO("micro-batch " << k);
    CHECK(bytes_of(ops, at1[k].hidden, micro_batches[k].size() * size_t(H) * 2) == whole_hidden[k]);
  }
  size_t compared = 0;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    INFO(w.layout.tensors[i].name);
    const size_t bytes = size_t(w.layout.tensors[i].numel()) * 4;
    int holders = 0;
    for (const auto& st : stages) {
      if (st->w.layout.tensors[i].numel() == 0) continue;  // another stage's tensor
      ++holders;
      CHECK(bytes_of(ops, st->grads[i], bytes) == bytes_of(ops, whole_grads[i], bytes));
    }
    CHECK(holders == 1);
    compared += size_t(holders);
  }
  CHECK(compared == w.layout.tensors.size());
}
