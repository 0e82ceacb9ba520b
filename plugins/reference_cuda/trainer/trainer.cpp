#include "trainer/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "backends/cpu/threads.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "model/named_tensors.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"
#include "model/scoring.hpp"
#include "model/vocabulary.hpp"
#include "trainer/batch_part.hpp"
#include "trainer/pipeline_run.hpp"

namespace mlpt::ref {

using sdk::Error;
using sdk::Settings;

namespace {
constexpr int64_t kHeadBlock = 64;  // LM-head rows at a time: logits never exist for a whole batch

}  // namespace

ReferenceTrainer::ReferenceTrainer(std::string_view config_json, const mlpt_component_group* group) : group_(group) {
  int64_t tp = 1, ep = 1, etp = 1, pp = 1;
  bool distributed_optimizer = true, folding = false;
  const TrainerSettings s = parse_trainer_settings(config_json, "trainer qwen35_cpu", [&](Settings& extra) {
    share_prefixes_ = extra.boolean_or("share_prefixes", true);
    tp = extra.integer_or("tensor_parallel", 1, 1);
    ep = extra.integer_or("expert_parallel", 1, 1);
    etp = extra.integer_or("expert_tensor_parallel", 1, 1);
    pp = extra.integer_or("pipeline_parallel", 1, 1);
    distributed_optimizer = extra.boolean_or("distributed_optimizer", true);
    folding = extra.boolean_or("moe_parallel_folding", false);
    save_piece_bytes_ = static_cast<size_t>(extra.integer_or("save_piece_bytes", static_cast<int64_t>(save_piece_bytes_), 1));
  });
  group_.split_model_parallel(static_cast<int>(tp), static_cast<int>(ep), static_cast<int>(etp),
                              static_cast<int>(pp),
                              /*vocab_parallel=*/true, folding);
  checkpoint_ = s.checkpoint;
  micro_batch_tokens_ = s.micro_batch_tokens;
  optimizer_ = s.optimizer;
  loss_ = s.loss;
  threads_ = static_cast<int>(s.threads);
  weights_ = group_.shard().sharded() ? load_shard_weights<float>(checkpoint_, group_.shard()) : load_weights<float>(checkpoint_);
  config_ = weights_.config;
  full_config_ = group_.shard().sharded() ? load_checkpoint_config(checkpoint_) : config_;
  valid_vocab_ = sampling_vocab_size(config_, checkpoint_, s.sampling_vocab_size);
  optimizer_shards_ = group_.optimizer_shards(weights_.layout, distributed_optimizer);
  m_ = optimizer_shards_.keep_range(zeros_like_layout<float>(weights_.config, weights_.layout));  // the shard's layout
  v_ = optimizer_shards_.keep_range(zeros_like_layout<float>(weights_.config, weights_.layout));
  grads_ = zeros_like_layout<float>(weights_.config, weights_.layout);
  trainable_ = trainable_tensors(weights_.layout, s.freeze_router);
}

ForwardBatch<float> ReferenceTrainer::forward_batch(PackedMicroBatch& packed) const {
  ForwardBatch<float> fb;
  if (group_.shard().sharded()) fb.parallel = &group_.model_parallel();
  fb.tokens = packed.tokens.data();
  fb.offsets = packed.offsets;
  fb.parents = packed.parents;
  if (!packed.replay.empty()) fb.replay_experts = packed.replay.data();
  fb.cancelled = &sdk::cancelled;  // the host's stop reaches every layer of a long step
  return fb;
}

// The micro-batch rows whose next token is scored (loss_mask = 1): the only rows the output head
// runs on (in an agentic episode about 1% of rows; prompts and observations are never scored).
std::vector<ReferenceTrainer::ScoredRow> ReferenceTrainer::scored_rows(const mlpt_train_batch& b, const MicroBatch& mb,
                                                                       const PackedMicroBatch& packed) {
  std::vector<ScoredRow> rows;
  for (size_t s = mb.first_seq; s < mb.end_seq; ++s)
    for (int64_t t = b.offsets[s] - mb.first_token; t + 1 < b.offsets[s + 1] - mb.first_token; ++t)
      if (b.loss_mask == nullptr || b.loss_mask[mb.first_token + t + 1]) rows.push_back({t, packed.row[t]});
  return rows;
}

void ReferenceTrainer::train_step(mlpt_train_step_args& args) {
  check_train_batch(*args.batch, config_, true);
  if (group_.shard().sharded()) group_.check_same_share(*args.batch);
  const BatchPartOf part(args, group_.batch_part(), group_.batch_parts());  // MoE parallel folding: this ep rank's
  const mlpt_train_batch& b = *args.batch;
  const cpu::CoreLease cores(cpu::Phase::train, threads_);  // the process's core budget, for this step
  const int64_t N = b.offsets[b.num_sequences], H = config_.hidden_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  // The LM head's rows here: the vocabulary, or this TP rank's range of it (vocab_parallel.hpp).
  const VocabRange vocab = vocab_range(config_.vocab_size, config_.shard);
  const int64_t V = vocab.count();
  Communicator* vocab_group = V < config_.vocab_size ? group_.model_parallel().tensor : nullptr;
  const bool last_stage = group_.shard().last_stage();  // the pipeline stage with the LM head
  const PrefixGroups groups = find_prefix_groups(b);
  const PrefixGroups* shared = share_prefixes_ ? &groups : nullptr;
  std::vector<MicroBatch> mbs = split_micro_batches(b, micro_batch_tokens_, true, shared);

  // Pass 1: forward every micro-batch once under the current weights for logp_prev of the scored
  // tokens (the last pipeline stage runs the head). No activations are kept: of the micro-batches
  // whose backward may run, only the experts used (recorded, or replayed from the engine), which
  // pass 2 replays.
  struct Saved {
    PackedMicroBatch packed;
    std::vector<int16_t> experts;
    std::vector<ScoredRow> rows;
    bool zero_gradient = false;  // kept for a zero-gradient backward (MoE parallel folding)
  };
  // MoE parallel folding: the expert-parallel ranks train different shares, but every forward's and
  // backward's expert dispatch needs all of them, so each runs as many of both as the busiest: a
  // rank with fewer micro-batches runs padding ones (padding_micro_batch), one with fewer backwards
  // runs zero-gradient ones on forwards it kept (its micro-batches that do not train, then padding).
  const int64_t trained =
      std::count_if(mbs.begin(), mbs.end(), [](const MicroBatch& mb) { return mb.trains; });
  const int64_t forwards = group_.most_over_folded_shares(static_cast<int64_t>(mbs.size()));
  const int64_t zero_backwards = group_.most_over_folded_shares(trained) - trained;
  int64_t kept_for_zero = 0;
  std::vector<Saved> saved(static_cast<size_t>(forwards));
  // A forward whose backward may run records its experts for pass 2.
  auto record_experts = [&](Saved& sv, ForwardBatch<float>& fb) {
    sv.experts.resize(static_cast<size_t>(fb.num_tokens() * per));
    fb.routed_experts = sv.experts.data();
  };
  std::vector<double> prev(static_cast<size_t>(N), 0.0);
  std::vector<float> logits(kHeadBlock * V), block_hidden(kHeadBlock * H);
  std::vector<int32_t> targets(kHeadBlock);
  std::vector<double> lse(kHeadBlock), logprob(kHeadBlock);
  // Gathers rows[r0, r0 + n) of `hidden` into block_hidden, runs the head on them and takes the
  // log-softmax of each row's next token (over the TP group when the vocabulary is split).
  auto head_block = [&](const std::vector<float>& hidden, const std::vector<ScoredRow>& rows,
                        const int32_t* tokens, size_t r0, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(hidden.data() + rows[r0 + i].row * H, H, block_hidden.data() + i * H);
      targets[i] = tokens[rows[r0 + i].t + 1];
    }
    lm_head_forward(weights_, n, block_hidden.data(), logits.data());
    vocab_log_softmax(vocab_group, vocab, valid_vocab_, n, logits.data(), targets.data(), lse.data(),
                      logprob.data());
  };
  int64_t computed_tokens = 0, head_rows = 0, shared_tokens = 0;
  for (size_t k = 0; k < mbs.size(); ++k) {
    Saved& sv = saved[k];
    sv.packed = pack_micro_batch(b, mbs[k], shared);
    ForwardBatch<float> fb = forward_batch(sv.packed);
    const int64_t n = fb.num_tokens();
    sv.zero_gradient = !mbs[k].trains && kept_for_zero < zero_backwards;
    kept_for_zero += sv.zero_gradient ? 1 : 0;
    if (mbs[k].trains || sv.zero_gradient) record_experts(sv, fb);
    const std::vector<float> hidden = forward_hidden(weights_, fb);  // empty on a stage before the last
    sv.rows = scored_rows(b, mbs[k], sv.packed);            // on every stage: pass 2 decides with them
    const int32_t* tokens = b.tokens + mbs[k].first_token;  // the micro-batch's tokens as sequences
    for (size_t r0 = 0; last_stage && r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      head_block(hidden, sv.rows, tokens, r0, rows);
      for (int64_t i = 0; i < rows; ++i) prev[mbs[k].first_token + sv.rows[r0 + i].t + 1] = logprob[i];
    }
    computed_tokens += n;
    shared_tokens += (mbs[k].end_token - mbs[k].first_token) - n;
    head_rows += last_stage ? static_cast<int64_t>(sv.rows.size()) : 0;
    if (!mbs[k].trains && !sv.zero_gradient) sv = Saved{};
  }
  for (size_t k = mbs.size(); k < saved.size(); ++k) {  // padding (above): no scored rows
    Saved& sv = saved[k];
    sv.packed = padding_micro_batch();
    ForwardBatch<float> fb = forward_batch(sv.packed);
    sv.zero_gradient = kept_for_zero < zero_backwards;
    kept_for_zero += sv.zero_gradient ? 1 : 0;
    if (sv.zero_gradient) record_experts(sv, fb);
    (void)forward_hidden(weights_, fb);
    if (!sv.zero_gradient) sv = Saved{};
  }

  // Pipeline stages: the last one scored the tokens; every stage makes the same loss plan from them.
  group_.sum_pipeline(prev.data(), prev.size());
  LossPlan plan = group_.plan_loss(args, prev, loss_);

  // Pass 2, for the micro-batches whose backward runs, in the 1F1B order (pipeline_schedule.hpp):
  // each one's forward again, replaying pass 1's experts under the same weights (so the same bits),
  // its layer inputs kept; at its backward the loss gradient at the output head over the scored rows
  // (the last stage), scattered into d(hidden), then the model backward (recomputing each layer from
  // its input). Stage s of P holds at most P − s micro-batches' layer inputs at once; backwards run in
  // micro-batch order, so the gradients sum in the order of one micro-batch at a time.
  for (auto& g : grads_.values) std::fill(g.begin(), g.end(), 0.0f);
  double total_loss = 0;
  int64_t backward_tokens = 0;
  std::vector<float> dlogits(kHeadBlock * V), d_block(kHeadBlock * H);
  std::vector<double> coef(kHeadBlock);
  const BackwardOptions options{trainable_[weights_.layout.layers.empty() ? 0 : weights_.layout.layers[0].moe.router]};
  // A micro-batch that trains runs its backward when a scored token's loss has a gradient, which
  // every stage knows from the plan: pass 2's logprobs are pass 1's, so the ratio in token_loss is 1
  // and a micro-batch whose every coefficient is 0 (TIS- or error-masked) has a zero gradient.
  // Under folding every training micro-batch runs its backward (a zero one adds zeros), so the
  // expert-parallel ranks dispatch alike, and then the zero-gradient ones (above).
  auto has_gradient = [&](size_t k) {
    for (const ScoredRow& r : saved[k].rows) {
      const int64_t gt = mbs[k].first_token + r.t + 1;  // the predicted token, global index
      if (token_loss(plan.weight[gt], prev[gt], prev[gt], loss_).grad != 0.0) return true;
    }
    return false;
  };
  std::vector<size_t> running, message_floats;  // indices into `saved`; each one's stage messages
  for (size_t k = 0; k < mbs.size(); ++k)
    if (mbs[k].trains && (group_.moe_parallel_folding() || has_gradient(k))) running.push_back(k);
  for (size_t k = 0; k < saved.size(); ++k)
    if (saved[k].zero_gradient) running.push_back(k);
  for (size_t k : running) message_floats.push_back(static_cast<size_t>(saved[k].packed.rows() * H));
  struct InFlight {  // a micro-batch between its forward and its backward
    ForwardBatch<float> fb;
    std::vector<float> layer_inputs, hidden;  // the stage's layer inputs; the last stage's output
  };
  std::map<size_t, InFlight> in_flight;
  auto stage_forward = [&](size_t j, const StageBoundary& boundary) {
    Saved& sv = saved[running[j]];
    InFlight& f = in_flight[j];
    f.fb = forward_batch(sv.packed);
    f.fb.replay_experts = sv.experts.data();  // the routing logp_prev was computed with
    f.fb.layer_inputs = &f.layer_inputs;
    f.fb.boundary = &boundary;
    f.hidden = forward_hidden(weights_, f.fb);
    f.fb.layer_inputs = nullptr;
    f.fb.boundary = nullptr;  // the boundary's buffers are this call's only
  };
  auto stage_backward = [&](size_t j, const StageBoundary& boundary) {
    const size_t k = running[j];
    auto done = in_flight.extract(j);  // its activations go when the backward ends
    InFlight& f = done.mapped();
    Saved& sv = saved[k];
    const int64_t n = f.fb.num_tokens();
    std::vector<float> d_hidden(static_cast<size_t>(last_stage ? n * H : 0), 0.0f);
    const int32_t* tokens = sv.zero_gradient ? nullptr : b.tokens + mbs[k].first_token;
    for (size_t r0 = 0; last_stage && !sv.zero_gradient && r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      bool any = false, computed = false;
      std::fill(coef.begin(), coef.end(), 0.0);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t gt = mbs[k].first_token + sv.rows[r0 + i].t + 1;  // the predicted token, global index
        if (plan.weight[gt] == 0.0) continue;
        if (!computed) {
          head_block(f.hidden, sv.rows, tokens, r0, rows);
          computed = true;
        }
        TokenLoss tl = token_loss(plan.weight[gt], logprob[i], prev[gt], loss_);
        total_loss += tl.loss;
        if (tl.grad == 0.0) continue;
        any = true;
        coef[i] = tl.grad;
      }
      if (!any) continue;
      // d loss / d logits = grad · (onehot − softmax) over the real vocabulary, each rank its range.
      vocab_log_softmax_backward(vocab, valid_vocab_, rows, logits.data(), targets.data(), lse.data(),
                                 coef.data(), dlogits.data());
      lm_head_backward(weights_, f.fb.parallel, rows, dlogits.data(), block_hidden.data(), d_block.data(),
                       grads_);
      for (int64_t i = 0; i < rows; ++i) {
        float* to = d_hidden.data() + sv.rows[r0 + i].row * H;
        for (int64_t j = 0; j < H; ++j) to[j] += d_block[i * H + j];
      }
    }
    f.fb.boundary = &boundary;
    backward(weights_, f.fb, f.layer_inputs, sv.experts.data(), last_stage ? d_hidden.data() : nullptr,
             grads_, options);
    backward_tokens += sv.zero_gradient ? 0 : n;
    sv = Saved{};  // its experts and rows are done with
  };
  const ModelShard& shard = group_.shard();
  Communicator* pipeline = shard.pp > 1 ? group_.model_parallel().pipeline : nullptr;
  const std::vector<PipelineStep> steps =
      run_one_forward_one_backward(pipeline, shard.pp, shard.pp_rank, message_floats, host_message_memory(),
                                   stage_forward, stage_backward);
  trace_pipeline_steps(group_.rank(), shard.pp, shard.pp_rank, steps);

  // Data parallel: the group's gradient is the sum of its ranks' (each normalised by the global
  // N_tok), and so are the loss and the counts the metrics report.
  // The loss and the head's rows are the last pipeline stage's; the token counts every stage's alike.
  double head_totals[2] = {total_loss, static_cast<double>(head_rows)};
  group_.sum_pipeline(head_totals, 2);
  total_loss = head_totals[0], head_rows = static_cast<int64_t>(head_totals[1]);
  StepWork work{mbs.size(), computed_tokens, backward_tokens, head_rows, shared_tokens};
  // The distributed optimizer reduce-scatters: each replica gets the sum of its ranges only.
  optimizer_shards_.reduce_scatter(grads_, trainable_);
  if (!optimizer_shards_.split()) {  // every replica keeps whole gradients: summed whole
    const std::vector<bool> routed = routed_expert_tensors(weights_.layout);
    for (size_t i = 0; i < grads_.values.size(); ++i)
      if (trainable_[i]) group_.sum_replicas(routed[i], grads_.values[i].data(), grads_.values[i].size());
  }
  group_.sum_step_totals(total_loss, plan, work);
  // The last point to stop: after it the weights change, and a stopped step must leave them as they
  // were. In a group the ranks could disagree on it, so a group stops at the step's boundary instead.
  if (group_.size() == 1 && sdk::cancelled()) throw Error(MLPT_CANCELLED, "train step cancelled before the optimizer update; weights unchanged");
  double norm = global_grad_norm();
  if (!std::isfinite(norm)) throw Error(MLPT_INTERNAL, "gradient norm is not finite; weights left unchanged");
  double scale = optimizer_.grad_clip > 0 && norm > optimizer_.grad_clip ? optimizer_.grad_clip / (norm + 1e-6) : 1.0;
  ++step_;
  adamw_update(weights_, grads_, m_, v_, step_, optimizer_, scale, trainable_, optimizer_shards_);
  optimizer_shards_.gather_updated(weights_, trainable_);
  ++version_;

  metrics_ = step_metrics(total_loss, norm, scale, plan, work, optimizer_.lr, step_);
  args.out_metrics = metrics_.data();
  args.out_num_metrics = metrics_.size();
  args.out_weight_version = version_;
}

double ReferenceTrainer::global_grad_norm() const {
  const bool sharded = group_.shard().sharded();
  const std::vector<TensorSpread> spreads =
      sharded ? tensor_spreads(weights_.config, weights_.layout, make_layout(full_config_))
              : std::vector<TensorSpread>(grads_.values.size(), TensorSpread::replicated);
  double squares[3] = {0, 0, 0};  // by TensorSpread
  for (size_t i = 0; i < grads_.values.size(); ++i)
    if (trainable_[i] && spreads[i] != TensorSpread::kv_copy)  // a copy counts on its first replica
      optimizer_shards_.add_range_squares(i, grads_.values[i], squares[static_cast<int>(spreads[i])]);
  if (optimizer_shards_.split())
    group_.sum_replica_squares(squares);  // each replica's ranges: every element once
  return sharded ? group_.global_norm(squares) : std::sqrt(squares[0] + squares[1] + squares[2]);
}

void ReferenceTrainer::compute_logprobs(mlpt_compute_logprobs_args& args) {
  const cpu::CoreLease cores(cpu::Phase::train, threads_);
  check_train_batch(*args.batch, config_, false);
  if (!args.out_logprobs) throw Error(MLPT_INVALID_ARGUMENT, "out_logprobs is NULL");
  const int64_t N = args.batch->offsets[args.batch->num_sequences];  // the replica's share
  std::vector<double> lp(static_cast<size_t>(N), 0.0);               // first token of each sequence: 0
  {
    // MoE parallel folding: each expert-parallel rank scores its part of the share, as it trains
    // it (padding forwards, agreed before the forwards the others' dispatches wait for, keep it in
    // their dispatches), and the parts, disjoint, are summed over the expert-parallel ranks (a
    // value plus zeros: exact).
    const BatchPartOf part(args, group_.batch_part(), group_.batch_parts());
    const mlpt_train_batch& b = *args.batch;
    const std::vector<MicroBatch> mbs = split_micro_batches(b, micro_batch_tokens_, false);
    const int64_t padding = group_.most_over_folded_shares(static_cast<int64_t>(mbs.size())) -
                            static_cast<int64_t>(mbs.size());
    for (const MicroBatch& mb : mbs) {
      PackedMicroBatch packed = pack_micro_batch(b, mb, nullptr);  // every sequence whole: all rows are read
      ForwardBatch<float> fb = forward_batch(packed);
      ScoreResult<float> r = score_sequences(weights_, fb, valid_vocab_);
      r.logprobs.resize(static_cast<size_t>(fb.num_tokens()), 0.0);  // zeros before the last pipeline stage
      group_.sum_pipeline(r.logprobs.data(), r.logprobs.size());      // the last stage's on every stage
      std::copy(r.logprobs.begin(), r.logprobs.end(), lp.begin() + part.first_token() + mb.first_token);
    }
    for (int64_t p = 0; p < padding; ++p) {
      PackedMicroBatch packed = padding_micro_batch();
      ForwardBatch<float> fb = forward_batch(packed);
      (void)forward_hidden(weights_, fb);
    }
  }
  if (group_.moe_parallel_folding()) group_.sum_expert_parallel(lp.data(), lp.size());
  for (int64_t t = 0; t < N; ++t) args.out_logprobs[t] = static_cast<float>(lp[t]);
}

void ReferenceTrainer::export_weights(mlpt_export_weights_args& args) {
  if (group_.shard().sharded()) {
    shard_export_.build(weights_, full_config_, group_.shard(), args);
  } else {
    exported_ = export_named_tensors(weights_, exported_shapes_);
    args.out_tensors = exported_.data();
    args.out_num_tensors = exported_.size();
  }
  args.out_weight_version = version_;
}

void ReferenceTrainer::save_state(std::string_view path) {
  StateRanks ranks = group_.state_ranks(full_config_);
  ranks.piece_bytes = save_piece_bytes_;
  ranks.moments = optimizer_shards_;  // each replica lends its ranges, piece by piece
  save_trainer_state(std::string(path), checkpoint_, weights_, m_, v_, step_, version_, ranks);
}

void ReferenceTrainer::load_state(std::string_view path) {
  TrainerState st =
      group_.load_state(std::string(path), weights_, full_config_, optimizer_shards_);  // m, v: ranges
  weights_ = std::move(st.weights);
  m_ = std::move(st.m);
  v_ = std::move(st.v);
  step_ = st.step;
  version_ = st.version;
}

}  // namespace mlpt::ref
