#include "trainer/trainer_common.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>

#include "model/safetensors.hpp"

namespace mlpt::ref {

namespace fs = std::filesystem;
using sdk::Error;

namespace {
constexpr const char* kStateFormat = "mlpt-reference-trainer-state";
// Shards of a saved model directory, as the published checkpoints are split (HF's default 5 GB).
constexpr size_t kShardBytes = size_t{5} << 30;
// The fp32 master weights live next to the moments: the model shards are in the input's dtypes.
constexpr const char* kMasterPrefix = "master.";

}  // namespace

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

void save_trainer_state(const std::string& path, const std::string& checkpoint_, const Weights<float>& weights_,
                        const Weights<float>& m_, const Weights<float>& v_, int64_t step_, uint64_t version_) {
  if (path.empty()) throw Error(MLPT_INVALID_ARGUMENT, "save_state: empty path");
  fs::path target = fs::absolute(path);
  fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    // A model directory HF and vLLM load like the input: its dtypes, its names, its mtp.* and
    // vision tensors.
    SafetensorsCheckpoint source(checkpoint_);
    save_checkpoint_as(tmp.string(), weights_, source, kShardBytes);
    std::vector<TensorToWrite> moments;
    for (size_t i = 0; i < weights_.layout.tensors.size(); ++i) {
      moments.push_back({kMasterPrefix + weights_.layout.tensors[i].name, weights_.layout.tensors[i].shape,
                         weights_.values[i].data(), Dtype::f32});
      moments.push_back({"exp_avg." + weights_.layout.tensors[i].name, weights_.layout.tensors[i].shape,
                         m_.values[i].data(), Dtype::f32});
      moments.push_back({"exp_avg_sq." + weights_.layout.tensors[i].name, weights_.layout.tensors[i].shape,
                         v_.values[i].data(), Dtype::f32});
    }
    write_safetensors((tmp / "optimizer.safetensors").string(), moments);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})  // a state is also a checkpoint
      if (fs::exists(fs::path(checkpoint_) / f)) fs::copy_file(fs::path(checkpoint_) / f, tmp / f);
    nlohmann::json state = {{"format", kStateFormat}, {"format_version", 1}, {"step", step_}, {"weight_version", version_}};
    write_file_atomic((tmp / "trainer_state.json").string(), state.dump(2) + "\n");
    // Swap the complete new directory in with one atomic call; the old one is removed after.
    if (fs::exists(target)) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
        throw Error(MLPT_INTERNAL, target.string() + ": atomic exchange failed: " + std::strerror(errno));
      fs::remove_all(tmp, ec);
    } else {
      fs::rename(tmp, target);
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

TrainerState load_trainer_state(const std::string& path, const Weights<float>& weights_) {
  auto corrupt = [&](const std::string& why) { return Error(MLPT_DATA_LOSS, "trainer state " + path + ": " + why); };
  nlohmann::json state;
  ModelConfig cfg;
  try {
    state = parse_json_file(path + "/trainer_state.json");
    cfg = load_model_config(path + "/config.json");
  } catch (const Error& e) {
    throw corrupt(e.what());
  }
  if (!state.is_object() || state.value("format", "") != kStateFormat || !state.contains("step") ||
      !state["step"].is_number_integer() || !state.contains("weight_version") || !state["weight_version"].is_number_unsigned())
    throw corrupt("trainer_state.json is not a " + std::string(kStateFormat) + " document");
  ModelLayout layout = make_layout(cfg);
  if (layout.tensors.size() != weights_.layout.tensors.size())
    throw Error(MLPT_INVALID_ARGUMENT, "trainer state " + path + " was saved for another model (tensor count differs)");
  for (size_t i = 0; i < layout.tensors.size(); ++i)
    if (layout.tensors[i].name != weights_.layout.tensors[i].name || layout.tensors[i].shape != weights_.layout.tensors[i].shape)
      throw Error(MLPT_INVALID_ARGUMENT, "trainer state " + path + " was saved for another model: tensor '" +
                                             layout.tensors[i].name + "' differs");
  Weights<float> w, m, v;
  try {
    w = zeros_like_layout<float>(cfg);
    m = zeros_like_layout<float>(cfg);
    v = zeros_like_layout<float>(cfg);
    SafetensorsFile opt(path + "/optimizer.safetensors");
    for (size_t i = 0; i < layout.tensors.size(); ++i) {
      read_tensor(opt, kMasterPrefix + layout.tensors[i].name, layout.tensors[i].shape, w.values[i].data());
      read_tensor(opt, "exp_avg." + layout.tensors[i].name, layout.tensors[i].shape, m.values[i].data());
      read_tensor(opt, "exp_avg_sq." + layout.tensors[i].name, layout.tensors[i].shape, v.values[i].data());
    }
  } catch (const Error& e) {
    throw corrupt(e.what());
  }
  w.config = weights_.config;  // same shapes; keep the running config document
  return TrainerState{std::move(w), std::move(m), std::move(v), state["step"].get<int64_t>(),
                      state["weight_version"].get<uint64_t>()};
}

}  // namespace mlpt::ref
