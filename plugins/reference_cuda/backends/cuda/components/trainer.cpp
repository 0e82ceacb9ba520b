#include "backends/cuda/components/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/optimizer.hpp"
#include "model/named_tensors.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/vocabulary.hpp"
#include "trainer/trainer_state.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::ref::cuda {

using sdk::Error;

namespace {
constexpr int64_t kHeadBlock = 1024;  // LM-head rows at a time: logits never exist for a whole batch

std::vector<DeviceBuffer> fp32_tensors(const ModelLayout& layout) {
  std::vector<DeviceBuffer> out;
  for (const auto& t : layout.tensors) out.emplace_back(size_t(std::max<int64_t>(t.numel(), 1)) * 4);
  return out;
}
void to_device(const Context& ctx, DeviceBuffer& d, const std::vector<float>& h) {
  check(cudaMemcpyAsync(d.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice, ctx.stream), "trainer: upload");
  check(cudaStreamSynchronize(ctx.stream), "trainer: upload");
}
}  // namespace

CudaTrainer::CudaTrainer(std::string_view config_json, const mlpt_component_group* group) : group_(group) {
  int64_t tp = 1, ep = 1;
  settings_ = parse_trainer_settings(config_json, "trainer qwen35_cuda", [&](Settings& s) {
    device_ = static_cast<int>(s.integer_or("device", 0, 0));
    tp = s.integer_or("tensor_parallel", 1, 1);
    ep = s.integer_or("expert_parallel", 1, 1);
  });
  group_.split_model_parallel(static_cast<int>(tp), static_cast<int>(ep));
  select_device(device_, "trainer qwen35_cuda");
  ctx_ = create_context();
  ws_ = make_workspace();
  const ModelParallel& groups = group_.model_parallel();
  if (groups.tensor) tensor_ = device_communicator(*groups.tensor, ctx_.stream);
  if (groups.expert) expert_ = device_communicator(*groups.expert, ctx_.stream);
  // The model exchanges routed rows over the host's expert group (host-staged dispatch, model.hpp).
  if (sharded()) parallel_ = ModelParallel{tensor_.group.get(), groups.expert};
  if (group_.data_parallel_group()) data_ = device_communicator(*group_.data_parallel_group(), ctx_.stream);
  Weights<float> w = sharded() ? load_shard_weights<float>(settings_.checkpoint, group_.shard())
                               : load_weights<float>(settings_.checkpoint);
  config_ = w.config;
  full_config_ = sharded() ? load_checkpoint_config(settings_.checkpoint) : config_;
  const ModelLayout full_layout = make_layout(full_config_);
  spreads_ = tensor_spreads(w.layout, full_layout);
  valid_vocab_ = sampling_vocab_size(config_, settings_.checkpoint, settings_.sampling_vocab_size);
  trainable_ = trainable_tensors(w.layout, settings_.freeze_router);
  Weights<float> zeros = zeros_like_layout<float>(config_);
  upload_all(w, zeros, zeros);
}

CudaTrainer::~CudaTrainer() {
  tensor_.group.reset();  // before their stream goes
  expert_.group.reset();
  data_.group.reset();
  destroy_context(ctx_);
}

void CudaTrainer::upload_all(const Weights<float>& w, const Weights<float>& m, const Weights<float>& v) {
  weights_ = upload_weights(ctx_, w);
  master_ = fp32_tensors(w.layout), m_ = fp32_tensors(w.layout), v_ = fp32_tensors(w.layout);
  grads_ = fp32_tensors(w.layout);
  for (size_t i = 0; i < w.values.size(); ++i) {
    to_device(ctx_, master_[i], w.values[i]);
    to_device(ctx_, m_[i], m.values[i]);
    to_device(ctx_, v_[i], v.values[i]);
  }
}

Weights<float> CudaTrainer::download(const std::vector<DeviceBuffer>& tensors) const {
  Weights<float> w = zeros_like_layout<float>(config_);
  for (size_t i = 0; i < w.values.size(); ++i)
    check(cudaMemcpyAsync(w.values[i].data(), tensors[i].get(), w.values[i].size() * 4, cudaMemcpyDeviceToHost,
                          ctx_.stream),
          "trainer: download");
  check(cudaStreamSynchronize(ctx_.stream), "trainer: download");
  return w;
}

DeviceBatch CudaTrainer::device_batch(const mlpt_train_batch& b, const MicroBatch& mb) const {
  DeviceBatch db;
  db.tokens.assign(b.tokens + mb.first_token, b.tokens + mb.end_token);
  db.offsets.clear();
  for (size_t s = mb.first_seq; s <= mb.end_seq; ++s) db.offsets.push_back(b.offsets[s] - mb.first_token);
  if (b.routed_experts) db.replay_experts = b.routed_experts + mb.first_token * b.num_moe_layers * b.experts_per_token;
  if (sharded()) db.parallel = &parallel_;
  return db;
}

void CudaTrainer::logprobs_of(const DeviceBatch& db, const bf16* hidden, int64_t first_token, double* out) {
  const int64_t n = db.num_tokens(), H = config_.hidden_size, V = config_.vocab_size;
  std::vector<int32_t> targets(size_t(n), 0);
  for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
    for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) targets[t] = db.tokens[t + 1];
  DeviceBuffer logits(size_t(std::min(kHeadBlock, n)) * size_t(V) * 4), lse(size_t(n) * 4), lp(size_t(n) * 4),
      dt(size_t(n) * 4);
  check(cudaMemcpyAsync(dt.get(), targets.data(), size_t(n) * 4, cudaMemcpyHostToDevice, ctx_.stream), "logprobs");
  for (int64_t r0 = 0; r0 < n; r0 += kHeadBlock) {
    const int64_t rows = std::min(kHeadBlock, n - r0);
    logits_forward(ctx_, rows, V, H, hidden + r0 * H, weights_.bf(weights_.layout.lm_head), logits.as<float>());
    token_logprobs(ctx_, rows, V, valid_vocab_, logits.as<float>(), dt.as<int32_t>() + r0, lp.as<float>() + r0,
                   lse.as<float>() + r0);
  }
  std::vector<float> h(static_cast<size_t>(n));
  check(cudaMemcpyAsync(h.data(), lp.get(), size_t(n) * 4, cudaMemcpyDeviceToHost, ctx_.stream), "logprobs");
  check(cudaStreamSynchronize(ctx_.stream), "logprobs");
  for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
    for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) out[first_token + t + 1] = h[t];
}

void CudaTrainer::train_step(mlpt_train_step_args& args) {
  check(cudaSetDevice(device_), "cudaSetDevice");  // the calling thread may be new
  const mlpt_train_batch& b = *args.batch;
  check_train_batch(b, config_, true);
  if (sharded()) group_.check_same_share(b);
  const int64_t N = b.offsets[b.num_sequences], H = config_.hidden_size, V = config_.vocab_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  const std::vector<MicroBatch> mbs = split_micro_batches(b, settings_.micro_batch_tokens, true);
  StepWork work{mbs.size()};

  // Pass 1: logp_prev under the current weights (the routing each micro-batch used is recorded).
  std::vector<double> prev(static_cast<size_t>(N), 0.0);
  std::vector<std::vector<int16_t>> experts(mbs.size());
  for (size_t k = 0; k < mbs.size(); ++k) {
    DeviceBatch db = device_batch(b, mbs[k]);
    experts[k].resize(size_t(db.num_tokens() * per));
    db.routed_experts = experts[k].data();
    DeviceBuffer hidden;
    forward_hidden(ctx_, weights_, db, *ws_, hidden, nullptr);
    logprobs_of(db, hidden.as<bf16>(), mbs[k].first_token, prev.data());
    work.forward_tokens += db.num_tokens();
    work.head_rows += db.num_tokens();  // the head runs on every row here
  }
  LossPlan plan = group_.plan_loss(args, prev, settings_.loss);

  // Pass 2: per micro-batch, forward (layer inputs kept), the GRPO loss gradient at the LM head
  // in row blocks on the device, then the backward.
  for (auto& g : grads_) check(cudaMemsetAsync(g.get(), 0, g.bytes(), ctx_.stream), "trainer: zero gradients");
  double total_loss = 0;
  const bool router_grad = !config_.num_layers || trainable_[weights_.layout.layers[0].moe.router];
  for (size_t k = 0; k < mbs.size(); ++k) {
    if (!mbs[k].trains) continue;  // no sequence here can change the weights
    DeviceBatch db = device_batch(b, mbs[k]);
    db.replay_experts = experts[k].data();  // the routing logp_prev was computed with
    const int64_t n = db.num_tokens(), first = mbs[k].first_token;
    DeviceBuffer hidden, inputs;
    forward_hidden(ctx_, weights_, db, *ws_, hidden, &inputs);
    std::vector<int32_t> targets(size_t(n), 0);
    std::vector<float> pw(size_t(n), 0.f), lp_prev(size_t(n), 0.f);
    for (size_t s = 0; s + 1 < db.offsets.size(); ++s)
      for (int64_t t = db.offsets[s]; t + 1 < db.offsets[s + 1]; ++t) {
        targets[t] = db.tokens[t + 1];
        pw[t] = static_cast<float>(plan.weight[first + t + 1]);
        lp_prev[t] = static_cast<float>(prev[first + t + 1]);
      }
    const size_t blk = size_t(std::min(kHeadBlock, n));
    DeviceBuffer logits(blk * size_t(V) * 4), dlogits(blk * size_t(V) * 2), lse(size_t(n) * 4), lp(size_t(n) * 4),
        dt(size_t(n) * 4), dpw(size_t(n) * 4), dprev(size_t(n) * 4), loss(size_t(n) * 4), coef(size_t(n) * 4),
        dh(size_t(n * H) * 2);
    check(cudaMemcpyAsync(dt.get(), targets.data(), size_t(n) * 4, cudaMemcpyHostToDevice, ctx_.stream), "trainer");
    check(cudaMemcpyAsync(dpw.get(), pw.data(), size_t(n) * 4, cudaMemcpyHostToDevice, ctx_.stream), "trainer");
    check(cudaMemcpyAsync(dprev.get(), lp_prev.data(), size_t(n) * 4, cudaMemcpyHostToDevice, ctx_.stream), "trainer");
    check(cudaMemsetAsync(dh.get(), 0, dh.bytes(), ctx_.stream), "trainer");
    for (int64_t r0 = 0; r0 < n; r0 += kHeadBlock) {
      const int64_t rows = std::min(kHeadBlock, n - r0);
      if (std::all_of(pw.begin() + r0, pw.begin() + r0 + rows, [](float x) { return x == 0.f; })) continue;
      const bf16* hb = hidden.as<bf16>() + r0 * H;
      logits_forward(ctx_, rows, V, H, hb, weights_.bf(weights_.layout.lm_head), logits.as<float>());
      token_logprobs(ctx_, rows, V, valid_vocab_, logits.as<float>(), dt.as<int32_t>() + r0, lp.as<float>() + r0,
                     lse.as<float>() + r0);
      grpo_token_loss(ctx_, rows, dpw.as<float>() + r0, lp.as<float>() + r0, dprev.as<float>() + r0,
                      settings_.loss.ppo_clip, settings_.loss.clip_low, settings_.loss.clip_high,
                      loss.as<float>() + r0, coef.as<float>() + r0);
      token_logprobs_backward(ctx_, rows, V, valid_vocab_, logits.as<float>(), lse.as<float>() + r0,
                              dt.as<int32_t>() + r0, coef.as<float>() + r0, dlogits.as<bf16>());
      linear_backward_input(ctx_, rows, V, H, dlogits.as<bf16>(), weights_.bf(weights_.layout.lm_head),
                            dh.as<bf16>() + r0 * H, false);
      linear_backward_weight(ctx_, rows, V, H, dlogits.as<bf16>(), hb, grads_[weights_.layout.lm_head].as<float>());
    }
    std::vector<float> token_loss(static_cast<size_t>(n));
    check(cudaMemcpyAsync(token_loss.data(), loss.get(), size_t(n) * 4, cudaMemcpyDeviceToHost, ctx_.stream),
          "trainer: loss");
    check(cudaStreamSynchronize(ctx_.stream), "trainer: loss");
    for (int64_t t = 0; t < n; ++t)
      if (pw[t] != 0.f) total_loss += token_loss[t];
    if (std::all_of(pw.begin(), pw.end(), [](float x) { return x == 0.f; })) continue;  // masked: zero gradient
    db.routed_experts = nullptr;
    backward(ctx_, weights_, db, inputs, experts[k].data(), dh.as<bf16>(), grads_, router_grad, *ws_);
    work.backward_tokens += n;
  }

  if (sharded()) agree_on_replicated_gradients();
  // Data parallel: each replica's gradient is normalised by the global N_tok, so their sum is the
  // whole batch's; summed on the device, the same bits on every replica.
  if (data_.group)
    for (size_t i = 0; i < grads_.size(); ++i)
      if (trainable_[i]) data_.group->all_reduce_sum(grads_[i].as<float>(), size_t(weights_.layout.tensors[i].numel()));
  group_.sum_step_totals(total_loss, plan, work);
  const double norm = global_grad_norm();
  if (!std::isfinite(norm)) throw Error(MLPT_INTERNAL, "gradient norm is not finite; weights left unchanged");
  const auto& o = settings_.optimizer;
  const double scale = o.grad_clip > 0 && norm > o.grad_clip ? o.grad_clip / (norm + 1e-6) : 1.0;
  ++step_;
  const AdamWStep st{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, step_, scale};
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!trainable_[i]) continue;
    adamw_update(ctx_, weights_.layout.tensors[i].numel(), st, grads_[i].as<float>(), master_[i].as<float>(),
                 m_[i].as<float>(), v_[i].as<float>(), nullptr);
    assign_tensor(ctx_, weights_, static_cast<int>(i), master_[i].as<float>());
  }
  check(cudaStreamSynchronize(ctx_.stream), "trainer: update");
  ++version_;
  metrics_ = step_metrics(total_loss, norm, scale, plan, work, o.lr, step_);
  args.out_metrics = metrics_.data();
  args.out_num_metrics = metrics_.size();
  args.out_weight_version = version_;
}

void CudaTrainer::agree_on_replicated_gradients() {
  // Tensor i's gradient made the one of the rank that keeps it (`keeper`) on every rank of `over`.
  auto agree = [&](size_t i, DeviceCommunicator& over, bool keeper) {
    if (!over.group) return;
    if (!keeper) check(cudaMemsetAsync(grads_[i].get(), 0, grads_[i].bytes(), ctx_.stream), "trainer: replicated gradients");
    over.group->all_reduce_sum(grads_[i].as<float>(), size_t(weights_.layout.tensors[i].numel()));
  };
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!trainable_[i]) continue;
    if (spreads_[i] == TensorSpread::replicated) agree(i, tensor_, group_.shard().tp_rank == 0);
    if (spreads_[i] != TensorSpread::routed_experts) agree(i, expert_, group_.shard().ep_rank == 0);
  }
}

double CudaTrainer::global_grad_norm() {
  DeviceBuffer sums(3 * sizeof(double));  // squares by TensorSpread
  check(cudaMemsetAsync(sums.get(), 0, sums.bytes(), ctx_.stream), "trainer: norm");
  for (size_t i = 0; i < grads_.size(); ++i)
    if (trainable_[i])
      sum_squares(ctx_, weights_.layout.tensors[i].numel(), grads_[i].as<float>(),
                  sums.as<double>() + static_cast<int>(spreads_[i]));
  double squares[3] = {0, 0, 0};
  check(cudaMemcpyAsync(squares, sums.get(), sizeof(squares), cudaMemcpyDeviceToHost, ctx_.stream), "trainer: norm");
  check(cudaStreamSynchronize(ctx_.stream), "trainer: norm");
  return group_.global_norm(squares);
}

void CudaTrainer::compute_logprobs(mlpt_compute_logprobs_args& args) {
  check(cudaSetDevice(device_), "cudaSetDevice");  // the calling thread may be new
  const mlpt_train_batch& b = *args.batch;
  check_train_batch(b, config_, false);
  if (!args.out_logprobs) throw Error(MLPT_INVALID_ARGUMENT, "out_logprobs is NULL");
  const int64_t N = b.offsets[b.num_sequences];
  std::vector<double> lp(static_cast<size_t>(N), 0.0);  // first token of each sequence: 0
  for (const MicroBatch& mb : split_micro_batches(b, settings_.micro_batch_tokens, false)) {
    DeviceBatch db = device_batch(b, mb);
    DeviceBuffer hidden;
    forward_hidden(ctx_, weights_, db, *ws_, hidden, nullptr);
    logprobs_of(db, hidden.as<bf16>(), mb.first_token, lp.data());
  }
  for (int64_t t = 0; t < N; ++t) args.out_logprobs[t] = static_cast<float>(lp[t]);
}

void CudaTrainer::export_weights(mlpt_export_weights_args& args) {
  if (sharded()) {  // host copies: a box of a fused tensor is not contiguous in the rank's tensor
    check(cudaSetDevice(device_), "cudaSetDevice");
    exported_masters_ = download(master_);
    exported_masters_.config = config_;
    shard_export_.build(exported_masters_, full_config_, group_.shard(), args);
    args.out_weight_version = version_;
    return;
  }
  std::vector<void*> data;
  for (auto& m : master_) data.push_back(m.get());
  exported_ = named_tensor_views(weights_.layout, data, DLDevice{kDLCUDA, device_}, exported_shapes_);
  args.out_tensors = exported_.data();
  args.out_num_tensors = exported_.size();
  args.out_weight_version = version_;
  // Readiness (mlpt.h, Device memory): the step's writes to the master weights are finished here.
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaStreamSynchronize(ctx_.stream), "trainer: export");
  if (mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_export_weights_args, out_ready)))
    args.out_ready = mlpt_device_ready{MLPT_DEVICE_READY_STRUCT_SIZE, MLPT_READY_ON_RETURN, ctx_.stream, nullptr};
}

void CudaTrainer::save_state(std::string_view path) {
  check(cudaSetDevice(device_), "cudaSetDevice");  // the calling thread may be new
  Weights<float> w = download(master_);
  w.config = config_;
  save_trainer_state(std::string(path), settings_.checkpoint, w, download(m_), download(v_), step_, version_,
                     group_.state_ranks(full_config_));
}

void CudaTrainer::load_state(std::string_view path) {
  check(cudaSetDevice(device_), "cudaSetDevice");  // the calling thread may be new
  Weights<float> current = zeros_like_layout<float>(config_);
  current.config = config_;
  TrainerState st = group_.load_state(std::string(path), current, full_config_);
  upload_all(st.weights, st.m, st.v);
  step_ = st.step;
  version_ = st.version;
}

}  // namespace mlpt::ref::cuda
