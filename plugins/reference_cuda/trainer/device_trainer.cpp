#include "trainer/device_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "device_model/rank_memory.hpp"
#include "device_model/vocab_head.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"
#include "model/named_tensors.hpp"
#include "model/vocabulary.hpp"
#include "trainer/batch_part.hpp"

namespace mlpt::ref {

using sdk::Error;

namespace {
constexpr int64_t kHeadBlock = dev::kHeadBlockRows;  // LM-head rows at a time (the memory plan counts them)

// Whether a micro-batch has a token with a loss weight: without one its gradient is zero.
bool weighs_in_loss(const mlpt_train_batch& b, const MicroBatch& mb, const LossPlan& plan) {
  for (size_t s = mb.first_seq; s < mb.end_seq; ++s)
    for (int64_t t = b.offsets[s]; t + 1 < b.offsets[s + 1]; ++t)
      if (static_cast<float>(plan.weight[size_t(t + 1)]) != 0.f) return true;
  return false;
}

std::vector<Buffer> fp32_tensors(Ops& ops, const ModelLayout& layout) {
  std::vector<Buffer> out;
  for (const auto& t : layout.tensors) out.emplace_back(ops, size_t(std::max<int64_t>(t.numel(), 1)) * 4);
  return out;
}
}  // namespace

DeviceTrainer::DeviceTrainer(std::string_view config_json, const mlpt_component_group* group,
                             const std::string& component,
                             const std::function<void(Settings&)>& platform_keys,
                             const std::function<std::unique_ptr<DevicePlatform>()>& make_platform)
    : group_(group) {
  int64_t tp = 1, ep = 1, etp = 1, pp = 1;
  bool distributed_optimizer = true, folding = false;
  settings_ = parse_trainer_settings(config_json, component, [&](Settings& s) {
    tp = s.integer_or("tensor_parallel", 1, 1);
    ep = s.integer_or("expert_parallel", 1, 1);
    etp = s.integer_or("expert_tensor_parallel", 1, 1);
    pp = s.integer_or("pipeline_parallel", 1, 1);
    distributed_optimizer = s.boolean_or("distributed_optimizer", true);
    folding = s.boolean_or("moe_parallel_folding", false);
    if (platform_keys) platform_keys(s);
  });
  // The embedding and LM head split by token ids over the TP ranks (device_model/vocab_head.hpp).
  group_.split_model_parallel(static_cast<int>(tp), static_cast<int>(ep), static_cast<int>(etp),
                              static_cast<int>(pp),
                              /*vocab_parallel=*/true, folding);
  platform_ = make_platform();
  ws_ = dev::make_workspace();
  const ModelParallel& groups = group_.model_parallel();
  std::string kind;
  if (groups.tensor) tensor_ = platform_->device_group(*groups.tensor, kind);
  if (groups.expert) expert_ = platform_->device_group(*groups.expert, kind);
  if (groups.pipeline) pipeline_ = platform_->device_group(*groups.pipeline, kind);
  // The model exchanges routed rows over the host's expert group (host-staged dispatch).
  if (sharded()) {
    parallel_ = ModelParallel{tensor_.get(), groups.expert, groups.routed, pipeline_.get()};
    parallel_.folded = groups.folded, parallel_.tensor_rows = groups.tensor_rows;  // host memory, as `routed`
  }
  if (group_.data_parallel_group()) data_ = platform_->device_group(*group_.data_parallel_group(), kind);
  if (group_.moe_parallel_folding() && group_.dense_replica_group())
    dense_ = platform_->device_group(*group_.dense_replica_group(), kind);
  Weights<float> w = sharded() ? load_shard_weights<float>(settings_.checkpoint, group_.shard())
                               : load_weights<float>(settings_.checkpoint);
  config_ = w.config;
  full_config_ = sharded() ? load_checkpoint_config(settings_.checkpoint) : config_;
  const ModelLayout full_layout = make_layout(full_config_);
  spreads_ = tensor_spreads(w.config, w.layout, full_layout);
  valid_vocab_ = sampling_vocab_size(config_, settings_.checkpoint, settings_.sampling_vocab_size);
  trainable_ = trainable_tensors(w.layout, settings_.freeze_router);
  routed_ = routed_expert_tensors(w.layout);
  optimizer_shards_ = group_.optimizer_shards(w.layout, distributed_optimizer);
  const Weights<float> zeros = zeros_like_layout<float>(config_, w.layout);
  upload_all(w, zeros, zeros);
  // The rule rank_memory.hpp's keeps_change_masks states for the memory plan.
  keeps_change_masks_ = optimizer_shards_.split() && !sharded();
  if (keeps_change_masks_) {
    size_t words = 0;
    for (const auto& t : weights_.layout.tensors) {
      mask_words_at_.push_back(words);
      words += sdk::changed_mask_words(t.numel());
    }
    change_masks_.reserve(ops(), dev::change_mask_bytes(weights_.layout));
    ops().zero(change_masks_.get(), change_masks_.bytes());
  }
}

uint32_t* DeviceTrainer::change_mask(size_t i) const {
  // Two 32-bit words per uint64 word, the low one first on this little-endian machine.
  return keeps_change_masks_ ? change_masks_.as<uint32_t>() + 2 * mask_words_at_[i] : nullptr;
}

const sdk::ChangedElementsExtension* DeviceTrainer::changed_since_published() {
  if (!keeps_change_masks_ || !published_version_) return nullptr;
  // The masks are the layout's tensors in order: so must the export be (export_named_tensors).
  const auto& tensors = weights_.layout.tensors;
  if (exported_.size() != tensors.size()) return nullptr;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sdk::view(exported_[i].name) != tensors[i].name) return nullptr;
  platform_->bind_thread();  // the calling thread may be new
  host_masks_.resize(change_masks_.bytes() / 8);
  ops().to_host(host_masks_.data(), change_masks_.get(), change_masks_.bytes());
  mask_views_.clear();
  for (size_t i = 0; i < tensors.size(); ++i) mask_views_.push_back(host_masks_.data() + mask_words_at_[i]);
  changes_.header = mlpt_extension{sizeof(changes_), sdk::kChangedElementsExtension, nullptr};
  changes_.since_version = *published_version_;
  changes_.masks = mask_views_.data();
  changes_.num_tensors = mask_views_.size();
  return &changes_;
}

void DeviceTrainer::published(uint64_t version) {
  if (!keeps_change_masks_) return;
  platform_->bind_thread();
  ops().zero(change_masks_.get(), change_masks_.bytes());
  published_version_ = version;
}

DeviceTrainer::~DeviceTrainer() {
  tensor_.reset();  // before the platform's streams go
  expert_.reset();
  pipeline_.reset();
  data_.reset();
  dense_.reset();
}

void DeviceTrainer::upload_all(const Weights<float>& w, const Weights<float>& m, const Weights<float>& v) {
  Ops& o = ops();
  weights_ = dev::upload_weights(o, w);
  grads_ = fp32_tensors(o, w.layout);
  master_ = upload_ranges(optimizer_shards_.keep_range(w));
  m_ = upload_ranges(optimizer_shards_.keep_range(m));
  v_ = upload_ranges(optimizer_shards_.keep_range(v));
}

std::vector<Buffer> DeviceTrainer::upload_ranges(const Weights<float>& kept) const {
  std::vector<Buffer> out;
  for (const std::vector<float>& range : kept.values) {
    const size_t bytes = range.size() * 4;
    out.emplace_back(ops(), std::max<size_t>(bytes, 4));  // an empty range still a valid pointer
    ops().to_device(out.back().get(), range.data(), bytes);
  }
  return out;
}

Weights<float> DeviceTrainer::host_ranges(const std::vector<Buffer>& ranges) const {
  Weights<float> kept = optimizer_shards_.keep_range(zeros_like_layout<float>(config_, weights_.layout));
  for (size_t i = 0; i < kept.values.size(); ++i)
    ops().to_host(kept.values[i].data(), ranges[i].get(), kept.values[i].size() * 4);
  return kept;
}

Weights<float> DeviceTrainer::download_ranges(const std::vector<Buffer>& ranges) const {
  return optimizer_shards_.gather_whole(host_ranges(ranges));
}

Weights<float> DeviceTrainer::download_working_weights() const {
  // In this rank's layout: a shard's expert tensors hold E/ep experts where config_ counts all E.
  Weights<float> w = zeros_like_layout<float>(config_, weights_.layout);
  for (size_t i = 0; i < w.values.size(); ++i)
    w.values[i] = dev::download_tensor(ops(), weights_, static_cast<int>(i));
  return w;
}

dev::DeviceBatch DeviceTrainer::padding_batch() const {
  const PackedMicroBatch padding = padding_micro_batch();
  dev::DeviceBatch db;
  db.tokens = padding.tokens;
  db.offsets = padding.offsets;
  if (sharded()) db.parallel = &parallel_;
  return db;
}

dev::DeviceBatch DeviceTrainer::device_batch(const mlpt_train_batch& b, const MicroBatch& mb) const {
  dev::DeviceBatch db;
  db.tokens.assign(b.tokens + mb.first_token, b.tokens + mb.end_token);
  db.offsets.clear();
  for (size_t s = mb.first_seq; s <= mb.end_seq; ++s) db.offsets.push_back(b.offsets[s] - mb.first_token);
  if (b.routed_experts)
    db.replay_experts = b.routed_experts + mb.first_token * b.num_moe_layers * b.experts_per_token;
  if (sharded()) db.parallel = &parallel_;
  return db;
}

void DeviceTrainer::logprobs_of(const dev::DeviceBatch& db, const bf16* hidden, int64_t first_token,
                                double* out) {
  Ops& o = ops();
  dev::VocabHead vocab_head(config_, tensor_.get(), valid_vocab_);  // this rank's LM-head rows
  const int64_t n = db.num_tokens(), H = config_.hidden_size, V = vocab_head.width();
  std::vector<int32_t> targets(size_t(n), 0);
  for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
    for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) targets[t] = db.tokens[t + 1];
  Buffer logits(o, size_t(std::max<int64_t>(std::min(kHeadBlock, n), 1)) * size_t(V) * 4), lse, lp, dt;
  const int32_t* d_targets = upload(o, dt, dev::vocab_local_ids(vocab_head.range(), targets));
  float* d_lse = take<float>(o, lse, n);
  float* d_lp = take<float>(o, lp, n);
  for (int64_t r0 = 0; r0 < n; r0 += kHeadBlock) {
    const int64_t rows = std::min(kHeadBlock, n - r0);
    o.logits_forward(rows, V, H, hidden + r0 * H, weights_.bf(weights_.layout.lm_head), logits.as<float>());
    vocab_head.logprobs(o, rows, logits.as<float>(), d_targets + r0, d_lp + r0, d_lse + r0);
  }
  std::vector<float> h(static_cast<size_t>(n));
  if (n) o.to_host(h.data(), d_lp, size_t(n) * 4);
  for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
    for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) out[first_token + t + 1] = h[t];
}

void DeviceTrainer::train_step(mlpt_train_step_args& args) {
  platform_->bind_thread();  // the calling thread may be new
  Ops& o = ops();
  check_train_batch(*args.batch, config_, true);
  if (sharded()) group_.check_same_share(*args.batch);
  // MoE parallel folding: this ep rank's part of the share (batch_part.hpp).
  const BatchPartOf part(args, group_.batch_part(), group_.batch_parts());
  const mlpt_train_batch& b = *args.batch;
  dev::VocabHead vocab_head(config_, tensor_.get(), valid_vocab_);  // this rank's LM-head rows
  const int64_t N = b.offsets[b.num_sequences], H = config_.hidden_size, V = vocab_head.width();
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  const std::vector<MicroBatch> mbs = split_micro_batches(b, settings_.micro_batch_tokens, true);
  StepWork work{mbs.size()};
  const bool last_stage = group_.shard().last_stage();  // the pipeline stage with the LM head

  // MoE parallel folding: the expert-parallel ranks train different shares, but every forward's and
  // backward's expert dispatch needs all of them, so each runs as many of both as the busiest, the
  // missing ones on a padding micro-batch (padding_micro_batch) whose gradient is zero. Agreed
  // before the forwards, which the others' dispatches wait for.
  const int64_t padding_forwards =
      group_.most_over_folded_shares(static_cast<int64_t>(mbs.size())) - static_cast<int64_t>(mbs.size());

  // Pass 1: logp_prev under the current weights (the routing each micro-batch used is recorded).
  std::vector<double> prev(static_cast<size_t>(N), 0.0);
  std::vector<std::vector<int16_t>> experts(mbs.size());
  for (size_t k = 0; k < mbs.size(); ++k) {
    dev::DeviceBatch db = device_batch(b, mbs[k]);
    experts[k].resize(size_t(db.num_tokens() * per));
    db.routed_experts = experts[k].data();
    Buffer hidden;
    dev::forward_hidden(o, weights_, db, *ws_, hidden, nullptr);
    work.forward_tokens += db.num_tokens();
    if (!last_stage) continue;
    logprobs_of(db, hidden.as<bf16>(), mbs[k].first_token, prev.data());
    work.head_rows += db.num_tokens();  // the head runs on every row here
  }
  for (int64_t p = 0; p < padding_forwards; ++p) {  // (above)
    dev::DeviceBatch db = padding_batch();
    Buffer hidden;
    dev::forward_hidden(o, weights_, db, *ws_, hidden, nullptr);
  }
  // Pipeline stages: the last one scored the tokens; every stage makes the same loss plan from them.
  group_.sum_pipeline(prev.data(), prev.size());
  LossPlan plan = group_.plan_loss(args, prev, settings_.loss);

  // Pass 2: per micro-batch, forward (layer inputs kept), the GRPO loss gradient at the LM head
  // in row blocks (the last pipeline stage), then the backward (through the stages, last to first).
  // Pipeline stages run them in the 1F1B order (pipeline_schedule.hpp): a stage holds at most
  // P - stage micro-batches between forward and backward; backwards stay in micro-batch order.
  for (auto& g : grads_) o.zero(g.get(), g.bytes());
  double total_loss = 0;
  const bool router_grad = !config_.num_layers || trainable_[weights_.layout.layers[0].moe.router];
  // The micro-batches that can change the weights (a sequence that trains, a token with a loss
  // weight): every pipeline stage has the same plan, so each runs the same ones.
  std::vector<size_t> running, message_floats;
  for (size_t k = 0; k < mbs.size(); ++k)
    if (mbs[k].trains && weighs_in_loss(b, mbs[k], plan)) {
      running.push_back(k);
      message_floats.push_back(size_t((mbs[k].end_token - mbs[k].first_token) * H));
    }
  constexpr size_t kPadding = ~size_t{0};  // a padding micro-batch in `running` (above)
  const size_t real = running.size();
  const size_t padded = static_cast<size_t>(group_.most_over_folded_shares(static_cast<int64_t>(real)));
  std::vector<std::vector<int16_t>> padding_experts(padded - real);
  for (size_t j = real; j < padded; ++j) {
    running.push_back(kPadding);
    message_floats.push_back(size_t(padding_batch().num_tokens() * H));
  }
  struct InFlight {  // a micro-batch between its forward and its backward
    dev::DeviceBatch db;
    Buffer hidden, inputs;  // the last stage's output; the stage's layer inputs (recomputation)
  };
  std::map<size_t, InFlight> in_flight;
  auto forward = [&](size_t j, const dev::StageBoundary& boundary) {
    const size_t k = running[j];
    InFlight& f = in_flight[j];
    if (k == kPadding) {  // its routing recorded for its backward
      f.db = padding_batch();
      padding_experts[j - real].resize(size_t(f.db.num_tokens() * per));
      f.db.routed_experts = padding_experts[j - real].data();
    } else {
      f.db = device_batch(b, mbs[k]);
      f.db.replay_experts = experts[k].data();  // the routing logp_prev was computed with
    }
    f.db.boundary = &boundary;
    dev::forward_hidden(o, weights_, f.db, *ws_, f.hidden, &f.inputs);
  };
  auto backward = [&](size_t j, const dev::StageBoundary& boundary) {
    const size_t k = running[j];
    auto done = in_flight.extract(j);  // its activations go when the backward ends
    dev::DeviceBatch& db = done.mapped().db;
    const Buffer &hidden = done.mapped().hidden, &inputs = done.mapped().inputs;
    db.boundary = &boundary;
    if (k == kPadding) {  // a zero gradient, for the expert dispatches
      db.routed_experts = nullptr;
      Buffer dh(o, size_t(db.num_tokens() * H) * 2);
      o.zero(dh.get(), dh.bytes());
      dev::backward(o, weights_, db, inputs, padding_experts[j - real].data(),
                    last_stage ? dh.as<bf16>() : nullptr, grads_, router_grad, *ws_);
      return;
    }
    const int64_t n = db.num_tokens(), first = mbs[k].first_token;
    std::vector<int32_t> targets(size_t(n), 0);
    std::vector<float> pw(size_t(n), 0.f), lp_prev(size_t(n), 0.f);
    for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
      for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) {
        targets[t] = db.tokens[t + 1];
        pw[t] = static_cast<float>(plan.weight[first + t + 1]);
        lp_prev[t] = static_cast<float>(prev[first + t + 1]);
      }
    if (!last_stage) {  // d(this stage's output) comes from the next stage
      db.routed_experts = nullptr;
      dev::backward(o, weights_, db, inputs, experts[k].data(), nullptr, grads_, router_grad, *ws_);
      work.backward_tokens += n;
      return;
    }
    const size_t blk = size_t(std::min(kHeadBlock, n));
    Buffer logits(o, blk * size_t(V) * 4), dlogits(o, blk * size_t(V) * 2), lse, lp, dt, dpw, dprev, loss,
        coef, dh(o, size_t(n * H) * 2);
    const int32_t* d_targets = upload(o, dt, dev::vocab_local_ids(vocab_head.range(), targets));
    const float* d_pw = upload(o, dpw, pw);
    const float* d_prev = upload(o, dprev, lp_prev);
    float* d_lse = take<float>(o, lse, n);
    float* d_lp = take<float>(o, lp, n);
    float* d_loss = take<float>(o, loss, n);
    float* d_coef = take<float>(o, coef, n);
    o.zero(d_loss, size_t(n) * 4);
    o.zero(dh.get(), dh.bytes());
    for (int64_t r0 = 0; r0 < n; r0 += kHeadBlock) {
      const int64_t rows = std::min(kHeadBlock, n - r0);
      if (std::all_of(pw.begin() + r0, pw.begin() + r0 + rows, [](float x) { return x == 0.f; })) continue;
      const bf16* hb = hidden.as<bf16>() + r0 * H;
      const bf16* head = weights_.bf(weights_.layout.lm_head);
      o.logits_forward(rows, V, H, hb, head, logits.as<float>());
      vocab_head.logprobs(o, rows, logits.as<float>(), d_targets + r0, d_lp + r0, d_lse + r0);
      o.grpo_token_loss(rows, d_pw + r0, d_lp + r0, d_prev + r0, settings_.loss.ppo_clip,
                        settings_.loss.clip_low, settings_.loss.clip_high, d_loss + r0, d_coef + r0);
      vocab_head.logprobs_backward(o, rows, logits.as<float>(), d_lse + r0, d_targets + r0, d_coef + r0,
                                   dlogits.as<bf16>());
      o.linear_backward_input(rows, V, H, dlogits.as<bf16>(), head, dh.as<bf16>() + r0 * H, false);
      o.linear_backward_weight(rows, V, H, dlogits.as<bf16>(), hb,
                               grads_[weights_.layout.lm_head].as<float>());
    }
    std::vector<float> token_loss(static_cast<size_t>(n));
    o.to_host(token_loss.data(), d_loss, size_t(n) * 4);
    for (int64_t t = 0; t < n; ++t)
      if (pw[t] != 0.f) total_loss += token_loss[t];
    vocab_head.sum_input_gradient(o, dh.as<bf16>(), n * H);  // each TP rank's columns' share
    db.routed_experts = nullptr;
    dev::backward(o, weights_, db, inputs, experts[k].data(), dh.as<bf16>(), grads_, router_grad, *ws_);
    work.backward_tokens += n;
  };
  const ModelShard& shard = group_.shard();
  pipeline_steps_ = run_one_forward_one_backward(o, pipeline_.get(), shard.pp, shard.pp_rank, message_floats,
                                                 forward, backward);
  trace_pipeline_steps(group_.rank(), shard.pp, shard.pp_rank, pipeline_steps_);

  // The loss and the head's rows are the last pipeline stage's.
  double head_totals[2] = {total_loss, static_cast<double>(work.head_rows)};
  group_.sum_pipeline(head_totals, 2);
  total_loss = head_totals[0], work.head_rows = static_cast<int64_t>(head_totals[1]);
  if (sharded()) agree_on_replicated_gradients();
  // Data parallel: each replica's gradient is normalised by the global N_tok, so their sum is the
  // whole batch's; summed on the device, the same bits on every replica. The distributed optimizer
  // reduce-scatters instead: each replica receives the sum of its ranges only.
  // Under MoE parallel folding the dense tensors' replicas are dp · ep ranks (replicas_of).
  Buffer summed;  // a replica's summed range (the reduce-scatter's receive buffer may not alias)
  for (size_t i = 0; i < grads_.size(); ++i) {
    Communicator* replicas = replicas_of(i);
    if (!updated(i) || !replicas) continue;
    const int64_t n = weights_.layout.tensors[i].numel();
    const ReplicaSplit& split = optimizer_shards_.of(i);
    if (split.replicas() == 1) {
      replicas->all_reduce_sum(grads_[i].as<float>(), size_t(n));
      continue;
    }
    const int64_t first = split.first(n), count = split.count(n);
    float* sum = take<float>(o, summed, std::max<int64_t>(count, 1));
    replicas->reduce_scatter_v(grads_[i].as<float>(), sum, split.counts(n).data());
    o.copy(grads_[i].as<float>() + first, sum, size_t(count) * 4);
  }
  group_.sum_step_totals(total_loss, plan, work);
  const double norm = global_grad_norm();
  if (!std::isfinite(norm)) throw Error(MLPT_INTERNAL, "gradient norm is not finite; weights left unchanged");
  const auto& opt = settings_.optimizer;
  const double scale = opt.grad_clip > 0 && norm > opt.grad_clip ? opt.grad_clip / (norm + 1e-6) : 1.0;
  ++step_;
  const AdamWStep st{opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, step_, scale};
  Buffer whole;  // a tensor's updated masters gathered from its replicas' ranges
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!updated(i)) continue;
    const ReplicaSplit& split = optimizer_shards_.of(i);
    const int64_t n = weights_.layout.tensors[i].numel(), first = split.first(n), count = split.count(n);
    float* master = master_[i].as<float>();  // this replica's range
    o.adamw_update(count, st, grads_[i].as<float>() + first, master, m_[i].as<float>(), v_[i].as<float>(),
                   nullptr);
    if (split.replicas() > 1) {  // the other replicas' ranges, on the device, for the working copy
      float* gathered = take<float>(o, whole, n);
      replicas_of(i)->all_gather_v(master, size_t(count), gathered, split.counts(n).data());
      master = gathered;
    }
    dev::assign_tensor(o, weights_, static_cast<int>(i), master, change_mask(i));
  }
  o.synchronize();
  ++version_;
  metrics_ = step_metrics(total_loss, norm, scale, plan, work, opt.lr, step_);
  args.out_metrics = metrics_.data();
  args.out_num_metrics = metrics_.size();
  args.out_weight_version = version_;
}

void DeviceTrainer::agree_on_replicated_gradients() {
  // Tensor i's gradient made the one of the rank that keeps it (`keeper`) on every rank of `over`.
  auto agree = [&](size_t i, Communicator* over, bool keeper) {
    if (!over) return;
    if (!keeper) ops().zero(grads_[i].get(), grads_[i].bytes());
    over->all_reduce_sum(grads_[i].as<float>(), size_t(weights_.layout.tensors[i].numel()));
  };
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!updated(i)) continue;
    if (spreads_[i] == TensorSpread::replicated) agree(i, tensor_.get(), group_.shard().tp_rank == 0);
    // Under MoE parallel folding the expert-parallel ranks' gradients differ (their own tokens):
    // summed over the dense replicas instead.
    if (spreads_[i] != TensorSpread::routed_experts && !group_.moe_parallel_folding())
      agree(i, expert_.get(), group_.shard().ep_rank == 0);
  }
}

double DeviceTrainer::global_grad_norm() {
  Ops& o = ops();
  Buffer sums(o, 3 * sizeof(double));  // squares by TensorSpread
  o.zero(sums.get(), sums.bytes());
  for (size_t i = 0; i < grads_.size(); ++i)
    if (updated(i) && spreads_[i] != TensorSpread::kv_copy) {  // a copy counts on its first replica
      const int64_t n = weights_.layout.tensors[i].numel();    // this replica's range: its summed part
      o.sum_squares(optimizer_shards_.of(i).count(n),
                    grads_[i].as<float>() + optimizer_shards_.of(i).first(n),
                    sums.as<double>() + static_cast<int>(spreads_[i]));
    }
  double squares[3] = {0, 0, 0};
  o.to_host(squares, sums.get(), sizeof(squares));
  if (optimizer_shards_.split())
    group_.sum_replica_squares(squares);  // each replica's ranges: every element once
  return group_.global_norm(squares);
}

void DeviceTrainer::compute_logprobs(mlpt_compute_logprobs_args& args) {
  platform_->bind_thread();  // the calling thread may be new
  check_train_batch(*args.batch, config_, false);
  if (!args.out_logprobs) throw Error(MLPT_INVALID_ARGUMENT, "out_logprobs is NULL");
  const int64_t N = args.batch->offsets[args.batch->num_sequences];  // the replica's share
  std::vector<double> lp(static_cast<size_t>(N), 0.0);               // first token of each sequence: 0
  {
    // MoE parallel folding: each expert-parallel rank scores its part of the share, as it trains
    // it (padding forwards keep it in the others' dispatches), and the parts, disjoint, are summed
    // over the expert-parallel ranks (a value plus zeros: exact).
    const BatchPartOf part(args, group_.batch_part(), group_.batch_parts());
    const mlpt_train_batch& b = *args.batch;
    const std::vector<MicroBatch> mbs = split_micro_batches(b, settings_.micro_batch_tokens, false);
    // Agreed before the forwards, which the others' dispatches wait for.
    const int64_t padding =
        group_.most_over_folded_shares(static_cast<int64_t>(mbs.size())) - static_cast<int64_t>(mbs.size());
    for (const MicroBatch& mb : mbs) {
      dev::DeviceBatch db = device_batch(b, mb);
      Buffer hidden;
      dev::forward_hidden(ops(), weights_, db, *ws_, hidden, nullptr);
      if (group_.shard().last_stage())
        logprobs_of(db, hidden.as<bf16>(), part.first_token() + mb.first_token, lp.data());
    }
    for (int64_t p = 0; p < padding; ++p) {
      Buffer hidden;
      dev::forward_hidden(ops(), weights_, padding_batch(), *ws_, hidden, nullptr);
    }
  }
  group_.sum_pipeline(lp.data(), lp.size());  // the last pipeline stage's on every stage
  if (group_.moe_parallel_folding()) group_.sum_expert_parallel(lp.data(), lp.size());
  for (int64_t t = 0; t < N; ++t) args.out_logprobs[t] = static_cast<float>(lp[t]);
}

void DeviceTrainer::export_weights(mlpt_export_weights_args& args) {
  platform_->bind_thread();
  // Host copies: a box of a fused tensor is not contiguous in the rank's tensor, and with the
  // masters split over the replicas no rank holds them whole (the working weights, the policy the
  // model runs, are whole on every replica).
  if (sharded() || optimizer_shards_.split()) {
    exported_host_ = optimizer_shards_.split() ? download_working_weights() : download_ranges(master_);
    exported_host_.config = config_;
    if (sharded()) {
      shard_export_.build(exported_host_, full_config_, group_.shard(), args);
    } else {
      exported_ = export_named_tensors(exported_host_, exported_shapes_);
      args.out_tensors = exported_.data();
      args.out_num_tensors = exported_.size();
    }
    args.out_weight_version = version_;
    return;
  }
  std::vector<void*> data;
  for (auto& m : master_) data.push_back(m.get());
  exported_ = named_tensor_views(weights_.layout, data, platform_->dl_device(), exported_shapes_);
  args.out_tensors = exported_.data();
  args.out_num_tensors = exported_.size();
  args.out_weight_version = version_;
  // Readiness (mlpt.h, Device memory): the step's writes to the master weights are finished here.
  ops().synchronize();
  if (mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_export_weights_args, out_ready)))
    args.out_ready =
        mlpt_device_ready{MLPT_DEVICE_READY_STRUCT_SIZE, MLPT_READY_ON_RETURN, platform_->stream(), nullptr};
}

void DeviceTrainer::save_state(std::string_view path) {
  platform_->bind_thread();                     // the calling thread may be new
  Weights<float> w = download_ranges(master_);  // whole: the model's files are written from them
  w.config = config_;
  StateRanks ranks = group_.state_ranks(full_config_);
  ranks.moments = optimizer_shards_;  // each replica lends its ranges of the moments, piece by piece
  save_trainer_state(std::string(path), settings_.checkpoint, w, host_ranges(m_), host_ranges(v_), step_,
                     version_, ranks);
}

void DeviceTrainer::load_state(std::string_view path) {
  platform_->bind_thread();  // the calling thread may be new
  TrainerState st =
      group_.load_state(std::string(path), zeros_like_layout<float>(config_, weights_.layout), full_config_);
  upload_all(st.weights, st.m, st.v);
  step_ = st.step;
  version_ = st.version;
  published_version_.reset();  // the working weights replaced: no change list until the next publish
}

}  // namespace mlpt::ref
