// An MPI program (one process per rank of a tp × ep × pp layout) that checks the sharded forward
// against the one-rank forward of the same weights: every rank runs both on a packed batch of two
// sequences and compares final hidden states, logprobs and routed experts; with --replay both
// replay the same given experts (R3) instead of the router's choice. World rank 0 prints one JSON
// line with the largest differences; every rank exits 1 past --tolerance (or when experts differ).
// With --backward the gradients of a fixed linear function of the hidden states too: this rank's
// slices of the one-rank gradients against its own, past --grad-tolerance (relative to each
// tensor's largest element) it fails. Generation too (prefill and decode steps with caches, the
// router's choice): the hidden states of every step against one rank's, past 1e-4 it fails.
// Under pipeline parallelism (--pp) the last stage compares hidden states, logprobs and generation
// (the others have none), every stage its own layers' experts and gradients; the first rank of the
// last stage prints, with the LM-head rows it holds (its vocabulary range under TP). --vocab N
// replaces the config's vocabulary size (one that does not split evenly over tp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/scoring.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref;

namespace {

struct Run {
  std::vector<float> hidden;
  std::vector<double> logprobs;
  std::vector<int16_t> experts;
  Weights<float> grads;  // with --backward: of <d_hidden, hidden>, d_hidden fixed pseudo-random
};

Run run(const Weights<float>& w, const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
        const std::vector<int16_t>* replay, const ModelParallel* parallel, bool with_backward) {
  const int64_t N = offsets.back();
  Run r;
  r.experts.assign(static_cast<size_t>(N * w.config.num_layers * w.config.experts_per_token), -1);
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = offsets;
  b.parallel = parallel;
  b.replay_experts = replay ? replay->data() : nullptr;
  b.routed_experts = r.experts.data();
  std::vector<float> layer_inputs;
  if (with_backward) b.layer_inputs = &layer_inputs;
  r.hidden = forward_hidden(w, b);
  if (with_backward) {
    std::vector<float> d_hidden(r.hidden.size());
    for (size_t i = 0; i < d_hidden.size(); ++i) d_hidden[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    r.grads = Weights<float>{w.config, w.layout, {}};  // a shard's shapes
    for (const auto& v : w.values) r.grads.values.emplace_back(v.size(), 0.0f);
    b.layer_inputs = nullptr;
    backward(w, b, layer_inputs, r.experts.data(), d_hidden.data(), r.grads, BackwardOptions{});
  }
  ForwardBatch<float> s;
  s.tokens = tokens.data();
  s.offsets = offsets;
  s.parallel = parallel;
  s.replay_experts = b.replay_experts;
  r.logprobs = score_sequences(w, s, w.config.vocab_size).logprobs;
  return r;
}

// Generation with caches: both sequences prefilled (their first 30 and 15 tokens) in one batch,
// then 4 decode steps of one token each; the final hidden states of every call, concatenated.
std::vector<float> generate(const Weights<float>& w, const std::vector<int32_t>& tokens,
                            const std::vector<int64_t>& offsets, const ModelParallel* parallel) {
  SequenceCache<float> first(w.config), second(w.config);  // a shard's cache holds its own heads
  std::vector<float> out;
  auto step = [&](std::vector<int32_t> ids, int64_t split) {
    ForwardBatch<float> b;
    b.tokens = ids.data();
    b.offsets = {0, split, static_cast<int64_t>(ids.size())};
    b.caches = {&first, &second};
    b.gdn_mode = ids.size() > 2 ? GdnMode::chunked : GdnMode::recurrent;
    b.parallel = parallel;
    const std::vector<float> h = forward_hidden(w, b);
    out.insert(out.end(), h.begin(), h.end());
  };
  std::vector<int32_t> prefill(tokens.begin(), tokens.begin() + 30);
  prefill.insert(prefill.end(), tokens.begin() + offsets[1], tokens.begin() + offsets[1] + 15);
  step(prefill, 30);
  for (int i = 0; i < 4; ++i) step({tokens[static_cast<size_t>(30 + i)], tokens[static_cast<size_t>(offsets[1] + 15 + i)]}, 1);
  return out;
}

// The largest difference of any gradient element, relative to the largest element of its tensor.
double max_relative_grad_diff(const Weights<float>& one, const Weights<float>& many) {
  double worst = 0;
  for (size_t i = 0; i < one.values.size(); ++i) {
    double scale = 1e-30, d = 0;
    for (size_t j = 0; j < one.values[i].size(); ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(one.values[i][j])));
      d = std::max(d, std::abs(static_cast<double>(one.values[i][j]) - static_cast<double>(many.values[i][j])));
    }
    worst = std::max(worst, d / scale);
  }
  return worst;
}

template <class V>
double max_diff(const V& a, const V& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

int check(int argc, char** argv) {
  std::string config_path;
  int tp = 1, ep = 1, etp = 1, pp = 1;
  int64_t vocab = 0;
  bool replay = false, with_backward = false;
  double tolerance = 1e-5, grad_tolerance = 1e-4, hidden_tolerance = 1e-4;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") config_path = value();
    else if (a == "--tp") tp = std::stoi(value());
    else if (a == "--ep") ep = std::stoi(value());
    else if (a == "--etp") etp = std::stoi(value());
    else if (a == "--pp") pp = std::stoi(value());
    else if (a == "--vocab") vocab = std::stoll(value());
    else if (a == "--tolerance") tolerance = std::stod(value());
    else if (a == "--grad-tolerance") grad_tolerance = std::stod(value());
    else if (a == "--replay") replay = true;
    else if (a == "--backward") with_backward = true;
    else throw std::runtime_error("unknown argument " + a);
  }
  MpiModelLayout layout(tp, ep, etp, pp);
  ModelConfig config = load_model_config(config_path);
  if (vocab > 0) config.vocab_size = vocab;
  Weights<float> full = init_weights<float>(config, 1234);
  // Two sequences (41 and 23 tokens) from a fixed linear congruential stream.
  const std::vector<int64_t> offsets{0, 41, 64};
  std::vector<int32_t> tokens(64);
  uint64_t x = 12345;
  for (auto& t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(config.vocab_size));
  }
  std::vector<int16_t> given;
  const std::vector<int16_t>* replayed = nullptr;
  if (replay) {  // experts the router would not all choose: the R3 path must use these
    const int64_t E = config.num_experts, k = config.experts_per_token;
    given.resize(static_cast<size_t>(64 * config.num_layers * k));
    for (size_t i = 0; i < given.size(); ++i) given[i] = static_cast<int16_t>((i * 7 + i / static_cast<size_t>(k)) % static_cast<size_t>(E));
    replayed = &given;
  }
  const Run one = run(full, tokens, offsets, replayed, nullptr, with_backward);
  const Weights<float> shard = shard_weights(full, layout.shard());
  const Run many = run(shard, tokens, offsets, replayed, &layout.groups(), with_backward);
  // This rank's slices of the one-rank gradients against the shard's.
  const double dg = with_backward ? max_relative_grad_diff(shard_weights(one.grads, layout.shard()), many.grads) : 0.0;
  const std::vector<float> decoded = generate(shard, tokens, offsets, &layout.groups());
  const std::vector<float> decoded_alone = generate(full, tokens, offsets, nullptr);
  const bool last = layout.shard().last_stage();  // the stage with the final hidden states
  const double dh = last ? max_diff(one.hidden, many.hidden) : 0.0, dl = last ? max_diff(one.logprobs, many.logprobs) : 0.0;
  const double dd = last ? max_diff(decoded_alone, decoded) : 0.0;
  // This stage's layers' experts ([tokens, layers, k]; another stage's slots stay unwritten).
  const StageLayers stage = stage_layers(config.num_layers, layout.shard());
  const int64_t k = config.experts_per_token;
  bool experts_equal = true;
  for (int64_t t = 0; t < 64; ++t)
    for (int64_t l = stage.first; l < stage.end; ++l)
      for (int64_t i = 0; i < k; ++i) {
        const size_t at = static_cast<size_t>((t * config.num_layers + l) * k + i);
        experts_equal = experts_equal && one.experts[at] == many.experts[at] && (!replay || many.experts[at] == given[at]);
      }
  if (last && layout.shard().world_rank() == 0)
    std::cout << nlohmann::json{{"config", config_path},
                                {"tp", tp},
                                {"ep", ep},
                                {"etp", etp},
                                {"pp", pp},
                                {"replay", replay},
                                {"max_hidden_diff", dh},
                                {"max_logprob_diff", dl},
                                {"experts_equal", experts_equal},
                                {"hidden_bitwise_equal", one.hidden == many.hidden},
                                {"generate_bitwise_equal", decoded_alone == decoded},
                                {"backward", with_backward},
                                {"max_grad_relative_diff", dg},
                                {"max_generate_hidden_diff", dd},
                                {"vocab_size", config.vocab_size},
                                {"lm_head_rows",
                                 shard.layout.tensors[static_cast<size_t>(shard.layout.lm_head)].shape[0]}}
                     .dump()
              << std::endl;
  return dl <= tolerance && dg <= grad_tolerance && dd <= hidden_tolerance && experts_equal && std::isfinite(dh) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return check(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "parallel_forward_check: " << e.what() << "\n";
    return 1;
  }
}
