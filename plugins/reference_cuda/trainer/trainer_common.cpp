#include "trainer/trainer_common.hpp"

#include <cmath>
#include <algorithm>

namespace mlpt::ref {

using sdk::Error;

TrainerSettings parse_trainer_settings(std::string_view json, const std::string& component,
                                       const std::function<void(Settings&)>& extra) {
  TrainerSettings t;
  Settings s(json, component);
  t.checkpoint = s.string("checkpoint");
  t.threads = s.integer_or("threads", 1, 1);
  t.micro_batch_tokens = s.integer_or("micro_batch_tokens", 8192, 1);
  t.sampling_vocab_size = s.integer_or("sampling_vocab_size", 0, 1);
  Settings opt = s.object("optimizer");
  t.optimizer.lr = opt.number_or("lr", 1e-6, 0.0, 1.0);
  if (opt.has("betas")) {
    const auto& b = opt.json()["betas"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
      opt.fail("betas", "expected [beta1, beta2]");
    t.optimizer.beta1 = b[0].get<double>();
    t.optimizer.beta2 = b[1].get<double>();
    if (!(t.optimizer.beta1 >= 0 && t.optimizer.beta1 < 1 && t.optimizer.beta2 >= 0 && t.optimizer.beta2 < 1))
      opt.fail("betas", "each must be in [0, 1)");
  }
  t.optimizer.eps = opt.number_or("eps", 1e-8, 0.0, 1.0);
  t.optimizer.weight_decay = opt.number_or("weight_decay", 0.0, 0.0, 1.0);
  t.optimizer.grad_clip = opt.number_or("grad_clip", 0.125);
  t.freeze_router = opt.boolean_or("freeze_router", true);
  opt.reject_unknown();
  Settings loss = s.object("loss");
  t.loss.tis_min = loss.number_or("tis_min", 0.999);
  t.loss.tis_max = loss.number_or("tis_max", 1.002);
  if (!(t.loss.tis_min <= t.loss.tis_max)) loss.fail("tis_min", "must not exceed tis_max");
  t.loss.logprob_error_max = loss.number_or("logprob_error_max", 2.0);
  t.loss.ppo_clip = loss.boolean_or("ppo_clip", false);
  t.loss.clip_low = loss.number_or("clip_low", 0.2, 0.0, 1.0);
  t.loss.clip_high = loss.number_or("clip_high", 0.28, 0.0, 10.0);
  if (loss.number_or("kl_coef", 0.0) != 0.0)
    loss.fail("kl_coef", "only 0 is supported (this trainer keeps no reference policy)");
  loss.reject_unknown();
  if (extra) extra(s);
  s.reject_unknown();
  return t;
}

void check_train_batch(const mlpt_train_batch& b, const ModelConfig& config, bool training) {
  if (training && (!b.loss_mask || !b.generation_logprobs || !b.advantages))
    throw Error(MLPT_INVALID_ARGUMENT, "train_step needs loss_mask, generation_logprobs and advantages");
  if (b.routed_experts && (b.num_moe_layers != config.num_moe_layers() || b.experts_per_token != config.experts_per_token))
    throw Error(MLPT_INVALID_ARGUMENT, "routed_experts are [token][" + std::to_string(b.num_moe_layers) + "][" +
                                           std::to_string(b.experts_per_token) + "], the model routes [token][" +
                                           std::to_string(config.num_moe_layers()) + "][" +
                                           std::to_string(config.experts_per_token) + "]");
  if (training)
    for (size_t i = 0; i < b.num_sequences; ++i)
      if (!std::isfinite(b.advantages[i]))
        throw Error(MLPT_INVALID_ARGUMENT, "advantage of sequence " + std::to_string(i) + " is not finite");
}

// A sequence changes the weights only with a nonzero advantage, not truncated, and with a trainable
// token; the rest are forwarded for their logprobs (the masks and N_tok need them) and nothing more.
bool sequence_trains(const mlpt_train_batch& b, size_t i) {
  if (!b.advantages || b.advantages[i] == 0.0f || (b.truncated && b.truncated[i])) return false;
  for (int64_t t = b.offsets[i] + 1; t < b.offsets[i + 1]; ++t)
    if (b.loss_mask[t]) return true;
  return false;
}

std::vector<MicroBatch> split_micro_batches(const mlpt_train_batch& b, int64_t max_tokens, bool training,
                                            const PrefixGroups* groups) {
  std::vector<MicroBatch> out;
  size_t i = 0;
  while (i < b.num_sequences) {
    const bool first_trains = training && sequence_trains(b, i);
    MicroBatch mb{i, i, b.offsets[i], b.offsets[i], first_trains};
    int64_t computed = 0, exempt = 0;  // tokens computed; the first sequence's when it alone overflows
    std::vector<size_t> seen;            // groups with a member in this micro-batch
    while (mb.end_seq < b.num_sequences) {
      const size_t s = mb.end_seq;
      const bool first_of_group =
          !groups || std::find(seen.begin(), seen.end(), groups->group[s]) == seen.end();
      const int64_t cost = groups ? groups->cost(b, s, first_of_group) : b.offsets[s + 1] - b.offsets[s];
      if (s > mb.first_seq) {
        if (training && sequence_trains(b, s) != first_trains) break;
        // Past an overlong first sequence only sequences that share its prefix ride along, while
        // their own tokens fit.
        if (computed + cost - exempt > max_tokens || (exempt > 0 && first_of_group)) break;
      }
      computed += cost;
      if (s == mb.first_seq && computed > max_tokens) exempt = computed;
      if (groups && first_of_group) seen.push_back(groups->group[s]);
      ++mb.end_seq;
    }
    mb.end_token = b.offsets[mb.end_seq];
    out.push_back(mb);
    i = mb.end_seq;
  }
  return out;
}

std::vector<bool> trainable_tensors(const ModelLayout& layout, bool freeze_router) {
  std::vector<bool> t(layout.tensors.size(), true);
  if (freeze_router)
    for (const auto& l : layout.layers) t[l.moe.router] = false;
  return t;
}

std::vector<mlpt_metric> step_metrics(double loss, double grad_norm, double clip_scale, const LossPlan& plan,
                                      const StepWork& work, double lr, int64_t step) {
  auto metric = [](const char* name, double value) {
    mlpt_metric m{};
    m.struct_size = MLPT_METRIC_STRUCT_SIZE;
    m.name = mlpt_string{name, std::char_traits<char>::length(name)};
    m.value = value;
    return m;
  };
  return {metric("loss", loss),
          metric("grad_norm", grad_norm),
          metric("grad_clip_scale", clip_scale),
          metric("tokens", static_cast<double>(plan.num_tokens)),
          metric("sequences", static_cast<double>(plan.sequences)),
          metric("truncated_sequences", static_cast<double>(plan.truncated)),
          metric("logprob_error_masked_sequences", static_cast<double>(plan.logprob_error_masked)),
          metric("tis_masked_sequences", static_cast<double>(plan.tis_masked)),
          metric("importance_weight_mean", plan.mean_importance_weight),
          metric("logprob_abs_diff_mean", plan.mean_abs_logprob_diff),
          metric("micro_batches", static_cast<double>(work.micro_batches)),
          metric("forward_tokens", static_cast<double>(work.forward_tokens)),
          metric("backward_tokens", static_cast<double>(work.backward_tokens)),
          metric("head_rows", static_cast<double>(work.head_rows)),
          metric("shared_prefix_tokens", static_cast<double>(work.shared_prefix_tokens)),
          metric("lr", lr),
          metric("step", static_cast<double>(step))};
}

}  // namespace mlpt::ref
