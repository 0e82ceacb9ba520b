#include "trainer/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "model/named_tensors.hpp"
#include "model/sampling.hpp"
#include "model/scoring.hpp"
#include "model/settings.hpp"
#include "model/vocabulary.hpp"

namespace mlpt::ref {

namespace fs = std::filesystem;
using sdk::Error;

namespace {
constexpr const char* kStateFormat = "mlpt-reference-trainer-state";
// Shards of a saved model directory, as the published checkpoints are split (HF's default 5 GB).
constexpr size_t kShardBytes = size_t{5} << 30;
// The fp32 master weights live next to the moments: the model shards are in the input's dtypes.
constexpr const char* kMasterPrefix = "master.";
constexpr int64_t kHeadBlock = 64;  // LM-head rows at a time: logits never exist for a whole batch

double read_range(Settings& s, const std::string& key, double fallback, double lo, double hi) {
  double v = s.number_or(key, fallback);
  if (!(v >= lo && v <= hi)) s.fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}
}  // namespace

ReferenceTrainer::ReferenceTrainer(std::string_view config_json) {
  Settings s(config_json, "trainer qwen35_cpu");
  checkpoint_ = s.string("checkpoint");
  int64_t threads = s.integer_or("threads", 1, 1);
  micro_batch_tokens_ = s.integer_or("micro_batch_tokens", 8192, 1);
  int64_t vocab_override = s.integer_or("sampling_vocab_size", 0, 1);
  Settings opt = s.object("optimizer");
  optimizer_.lr = read_range(opt, "lr", 1e-6, 0.0, 1.0);
  if (opt.has("betas")) {
    const auto& b = opt.json()["betas"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
      opt.fail("betas", "expected [beta1, beta2]");
    optimizer_.beta1 = b[0].get<double>();
    optimizer_.beta2 = b[1].get<double>();
    if (!(optimizer_.beta1 >= 0 && optimizer_.beta1 < 1 && optimizer_.beta2 >= 0 && optimizer_.beta2 < 1))
      opt.fail("betas", "each must be in [0, 1)");
  }
  optimizer_.eps = read_range(opt, "eps", 1e-8, 0.0, 1.0);
  optimizer_.weight_decay = read_range(opt, "weight_decay", 0.0, 0.0, 1.0);
  optimizer_.grad_clip = opt.number_or("grad_clip", 0.125);
  bool freeze_router = opt.boolean_or("freeze_router", true);
  opt.reject_unknown();
  Settings loss = s.object("loss");
  loss_.tis_min = loss.number_or("tis_min", 0.999);
  loss_.tis_max = loss.number_or("tis_max", 1.002);
  if (!(loss_.tis_min <= loss_.tis_max)) loss.fail("tis_min", "must not exceed tis_max");
  loss_.logprob_error_max = loss.number_or("logprob_error_max", 2.0);
  loss_.ppo_clip = loss.boolean_or("ppo_clip", false);
  loss_.clip_low = read_range(loss, "clip_low", 0.2, 0.0, 1.0);
  loss_.clip_high = read_range(loss, "clip_high", 0.28, 0.0, 10.0);
  if (loss.number_or("kl_coef", 0.0) != 0.0)
    loss.fail("kl_coef", "only 0 is supported (this trainer keeps no reference policy)");
  loss.reject_unknown();
  s.reject_unknown();

  threads_ = static_cast<int>(threads);
  weights_ = load_weights<float>(checkpoint_);
  config_ = weights_.config;
  valid_vocab_ = sampling_vocab_size(config_, checkpoint_, vocab_override);
  m_ = zeros_like_layout<float>(config_);
  v_ = zeros_like_layout<float>(config_);
  grads_ = zeros_like_layout<float>(config_);
  trainable_.assign(weights_.layout.tensors.size(), true);
  if (freeze_router)
    for (const auto& l : weights_.layout.layers) trainable_[l.moe.router] = false;
}

void ReferenceTrainer::check_batch(const mlpt_train_batch& b, bool training) const {
  if (training && (!b.loss_mask || !b.generation_logprobs || !b.advantages))
    throw Error(MLPT_INVALID_ARGUMENT, "train_step needs loss_mask, generation_logprobs and advantages");
  if (b.routed_experts && (b.num_moe_layers != config_.num_moe_layers() || b.experts_per_token != config_.experts_per_token))
    throw Error(MLPT_INVALID_ARGUMENT, "routed_experts are [token][" + std::to_string(b.num_moe_layers) + "][" +
                                           std::to_string(b.experts_per_token) + "], the model routes [token][" +
                                           std::to_string(config_.num_moe_layers()) + "][" +
                                           std::to_string(config_.experts_per_token) + "]");
  if (training)
    for (size_t i = 0; i < b.num_sequences; ++i)
      if (!std::isfinite(b.advantages[i]))
        throw Error(MLPT_INVALID_ARGUMENT, "advantage of sequence " + std::to_string(i) + " is not finite");
}

// A sequence changes the weights only with a nonzero advantage, not truncated, and with a trainable
// token; the rest are forwarded for their logprobs (the masks and N_tok need them) and nothing more.
bool ReferenceTrainer::trains(const mlpt_train_batch& b, size_t i) {
  if (!b.advantages || b.advantages[i] == 0.0f || (b.truncated && b.truncated[i])) return false;
  for (int64_t t = b.offsets[i] + 1; t < b.offsets[i + 1]; ++t)
    if (b.loss_mask[t]) return true;
  return false;
}

// Whole sequences up to micro_batch_tokens; in a train step a micro-batch also never mixes
// sequences that train with ones that do not, so the latter skip the backward as a whole.
std::vector<ReferenceTrainer::MicroBatch> ReferenceTrainer::split(const mlpt_train_batch& b, bool training) const {
  std::vector<MicroBatch> out;
  size_t i = 0;
  while (i < b.num_sequences) {
    const bool first_trains = training && trains(b, i);
    MicroBatch mb{i, i, b.offsets[i], b.offsets[i], first_trains};
    while (mb.end_seq < b.num_sequences &&
           (mb.end_seq == mb.first_seq ||
            (b.offsets[mb.end_seq + 1] - mb.first_token <= micro_batch_tokens_ &&
             (!training || trains(b, mb.end_seq) == first_trains))))
      ++mb.end_seq;
    mb.end_token = b.offsets[mb.end_seq];
    out.push_back(mb);
    i = mb.end_seq;
  }
  return out;
}

ForwardBatch<float> ReferenceTrainer::forward_batch(const mlpt_train_batch& b, const MicroBatch& mb) const {
  ForwardBatch<float> fb;
  fb.tokens = b.tokens + mb.first_token;
  fb.offsets.clear();
  for (size_t s = mb.first_seq; s <= mb.end_seq; ++s) fb.offsets.push_back(b.offsets[s] - mb.first_token);
  if (b.routed_experts) fb.replay_experts = b.routed_experts + mb.first_token * b.num_moe_layers * b.experts_per_token;
  return fb;
}

// The micro-batch rows whose next token is scored (loss_mask = 1): the only rows the output head
// runs on (in an agentic episode about 1% of rows; prompts and observations are never scored).
std::vector<int64_t> ReferenceTrainer::scored_rows(const mlpt_train_batch& b, const MicroBatch& mb,
                                                   const ForwardBatch<float>& fb) {
  std::vector<int64_t> rows;
  for (size_t s = 0; s + 1 < fb.offsets.size(); ++s)
    for (int64_t t = fb.offsets[s]; t + 1 < fb.offsets[s + 1]; ++t)
      if (b.loss_mask == nullptr || b.loss_mask[mb.first_token + t + 1]) rows.push_back(t);
  return rows;
}

void ReferenceTrainer::train_step(mlpt_train_step_args& args) {
  const mlpt_train_batch& b = *args.batch;
  cpu::set_cpu_threads(threads_);  // per calling thread (OpenMP)
  check_batch(b, true);
  const int64_t N = b.offsets[b.num_sequences], H = config_.hidden_size, V = config_.vocab_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  std::vector<MicroBatch> mbs = split(b, true);

  // Pass 1: forward every micro-batch once under the current weights for logp_prev of the scored
  // tokens. Micro-batches that train also keep their layer inputs, the experts used (recorded, or
  // replayed from the engine) and the final hidden states for pass 2.
  struct Saved {
    ForwardBatch<float> fb;
    std::vector<float> layer_inputs, hidden;
    std::vector<int16_t> experts;
    std::vector<int64_t> rows;  // scored rows
  };
  std::vector<Saved> saved(mbs.size());
  std::vector<double> prev(static_cast<size_t>(N), 0.0);
  std::vector<float> logits(kHeadBlock * V), block_hidden(kHeadBlock * H);
  // Gathers rows[r0, r0 + n) of `hidden` into block_hidden and runs the head on them.
  auto head_block = [&](const Saved& sv, size_t r0, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(sv.hidden.data() + sv.rows[r0 + i] * H, H, block_hidden.data() + i * H);
    lm_head_forward(weights_, n, block_hidden.data(), logits.data());
  };
  int64_t computed_tokens = 0, head_rows = 0;
  for (size_t k = 0; k < mbs.size(); ++k) {
    Saved& sv = saved[k];
    sv.fb = forward_batch(b, mbs[k]);
    const int64_t n = sv.fb.num_tokens();
    if (mbs[k].trains) {
      sv.experts.resize(static_cast<size_t>(n * per));
      sv.fb.routed_experts = sv.experts.data();
      sv.fb.layer_inputs = &sv.layer_inputs;
    }
    sv.hidden = forward_hidden(weights_, sv.fb);
    sv.fb.routed_experts = nullptr;
    sv.fb.layer_inputs = nullptr;
    sv.rows = scored_rows(b, mbs[k], sv.fb);
    for (size_t r0 = 0; r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      head_block(sv, r0, rows);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = sv.rows[r0 + i];
        prev[mbs[k].first_token + t + 1] = token_logprob(logits.data() + i * V, valid_vocab_, sv.fb.tokens[t + 1]);
      }
    }
    computed_tokens += n;
    head_rows += static_cast<int64_t>(sv.rows.size());
    if (!mbs[k].trains) sv = Saved{};
  }

  LossPlan plan = plan_loss(b, prev, loss_);

  // Pass 2, for the micro-batches that train: the loss gradient at the output head over the scored
  // rows, scattered into d(hidden), then the model backward.
  for (auto& g : grads_.values) std::fill(g.begin(), g.end(), 0.0f);
  double total_loss = 0;
  int64_t backward_tokens = 0;
  std::vector<float> dlogits(kHeadBlock * V), d_block(kHeadBlock * H);
  const BackwardOptions options{trainable_[weights_.layout.layers.empty() ? 0 : weights_.layout.layers[0].moe.router]};
  for (size_t k = 0; k < mbs.size(); ++k) {
    if (!mbs[k].trains) continue;
    Saved& sv = saved[k];
    const int64_t n = sv.fb.num_tokens();
    std::vector<float> d_hidden(static_cast<size_t>(n * H), 0.0f);
    bool any_gradient = false;
    for (size_t r0 = 0; r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      bool any = false, computed = false;
      std::fill(dlogits.begin(), dlogits.begin() + rows * V, 0.0f);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = sv.rows[r0 + i];
        const int64_t gt = mbs[k].first_token + t + 1;  // the predicted token, global index
        if (plan.weight[gt] == 0.0) continue;
        if (!computed) {
          head_block(sv, r0, rows);
          computed = true;
        }
        const float* l = logits.data() + i * V;
        double lp = token_logprob(l, valid_vocab_, sv.fb.tokens[t + 1]);
        TokenLoss tl = token_loss(plan.weight[gt], lp, prev[gt], loss_);
        total_loss += tl.loss;
        if (tl.grad == 0.0) continue;
        any = true;
        // d loss / d logits = grad · (onehot − softmax) over the real vocabulary.
        double lse = static_cast<double>(l[sv.fb.tokens[t + 1]]) - lp;
        float* dl = dlogits.data() + i * V;
        for (int64_t v = 0; v < valid_vocab_; ++v)
          dl[v] = static_cast<float>(-tl.grad * std::exp(static_cast<double>(l[v]) - lse));
        dl[sv.fb.tokens[t + 1]] += static_cast<float>(tl.grad);
      }
      if (!any) continue;
      any_gradient = true;
      cpu::linear_backward_input(rows, V, H, dlogits.data(), weights_[weights_.layout.lm_head], d_block.data(), false);
      for (int64_t i = 0; i < rows; ++i)
        std::copy_n(d_block.data() + i * H, H, d_hidden.data() + sv.rows[r0 + i] * H);
      cpu::linear_backward_weight(rows, V, H, dlogits.data(), block_hidden.data(), grads_[weights_.layout.lm_head]);
    }
    // A micro-batch whose every coefficient came out 0 (TIS- or error-masked) has a zero gradient.
    if (any_gradient) {
      backward(weights_, sv.fb, sv.layer_inputs, sv.experts.data(), d_hidden.data(), grads_, options);
      backward_tokens += n;
    }
    sv = Saved{};  // free this micro-batch's activations
  }

  double norm = grad_norm(grads_, trainable_);
  if (!std::isfinite(norm)) throw Error(MLPT_INTERNAL, "gradient norm is not finite; weights left unchanged");
  double scale = optimizer_.grad_clip > 0 && norm > optimizer_.grad_clip ? optimizer_.grad_clip / (norm + 1e-6) : 1.0;
  ++step_;
  adamw_update(weights_, grads_, m_, v_, step_, optimizer_, scale, trainable_);
  ++version_;

  auto metric = [](const char* name, double value) {
    mlpt_metric m{};
    m.struct_size = MLPT_METRIC_STRUCT_SIZE;
    m.name = mlpt_string{name, std::char_traits<char>::length(name)};
    m.value = value;
    return m;
  };
  metrics_ = {metric("loss", total_loss),
              metric("grad_norm", norm),
              metric("grad_clip_scale", scale),
              metric("tokens", static_cast<double>(plan.num_tokens)),
              metric("sequences", static_cast<double>(plan.sequences)),
              metric("truncated_sequences", static_cast<double>(plan.truncated)),
              metric("logprob_error_masked_sequences", static_cast<double>(plan.logprob_error_masked)),
              metric("tis_masked_sequences", static_cast<double>(plan.tis_masked)),
              metric("importance_weight_mean", plan.mean_importance_weight),
              metric("logprob_abs_diff_mean", plan.mean_abs_logprob_diff),
              metric("micro_batches", static_cast<double>(mbs.size())),
              metric("forward_tokens", static_cast<double>(computed_tokens)),
              metric("backward_tokens", static_cast<double>(backward_tokens)),
              metric("head_rows", static_cast<double>(head_rows)),
              metric("lr", optimizer_.lr),
              metric("step", static_cast<double>(step_))};
  args.out_metrics = metrics_.data();
  args.out_num_metrics = metrics_.size();
  args.out_weight_version = version_;
}

void ReferenceTrainer::compute_logprobs(mlpt_compute_logprobs_args& args) {
  const mlpt_train_batch& b = *args.batch;
  cpu::set_cpu_threads(threads_);
  check_batch(b, false);
  if (!args.out_logprobs) throw Error(MLPT_INVALID_ARGUMENT, "out_logprobs is NULL");
  for (const MicroBatch& mb : split(b, false)) {
    ForwardBatch<float> fb = forward_batch(b, mb);
    ScoreResult<float> r = score_sequences(weights_, fb, valid_vocab_);
    for (int64_t t = 0; t < fb.num_tokens(); ++t) args.out_logprobs[mb.first_token + t] = static_cast<float>(r.logprobs[t]);
  }
}

void ReferenceTrainer::export_weights(mlpt_export_weights_args& args) {
  exported_ = export_named_tensors(weights_, exported_shapes_);
  args.out_tensors = exported_.data();
  args.out_num_tensors = exported_.size();
  args.out_weight_version = version_;
}

void ReferenceTrainer::save_state(std::string_view path_view) {
  const std::string path(path_view);
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

void ReferenceTrainer::load_state(std::string_view path_view) {
  const std::string path(path_view);
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
  w.config = config_;  // same shapes; keep the running config document
  weights_ = std::move(w);
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = state["step"].get<int64_t>();
  version_ = state["weight_version"].get<uint64_t>();
}

}  // namespace mlpt::ref
