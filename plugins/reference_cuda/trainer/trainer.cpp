#include "trainer/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iterator>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "model/named_tensors.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/sampling.hpp"
#include "model/scoring.hpp"
#include "model/vocabulary.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/xxhash64.hpp"

namespace mlpt::ref {

using sdk::Error;
using sdk::Settings;

namespace {
constexpr int64_t kHeadBlock = 64;  // LM-head rows at a time: logits never exist for a whole batch

// Zeros in the layout of `w` (a shard's expert tensors hold only its block of experts).
Weights<float> zeros_like(const Weights<float>& w) {
  Weights<float> z;
  z.config = w.config;
  z.layout = w.layout;
  z.values.resize(w.values.size());
  for (size_t i = 0; i < w.values.size(); ++i) z.values[i].assign(w.values[i].size(), 0.0f);
  return z;
}

// Joins consecutive boxes that continue each other along one dimension, in the local tensor and in
// the global one alike: a rank that holds a fused tensor whole (GDN's q | k | v under expert
// parallelism alone) exports it as one box, which a transport taking one box per name per sender
// rank can carry.
std::vector<ShardBox> joined(const std::vector<ShardBox>& boxes) {
  std::vector<ShardBox> out;
  for (const ShardBox& b : boxes) {
    if (!out.empty()) {
      ShardBox& last = out.back();
      int along = -1;
      bool continues = last.extent.size() == b.extent.size();
      for (size_t d = 0; continues && d < b.extent.size(); ++d) {
        if (last.local_offset[d] == b.local_offset[d] && last.global_offset[d] == b.global_offset[d] &&
            last.extent[d] == b.extent[d])
          continue;
        continues = along < 0 && b.local_offset[d] == last.local_offset[d] + last.extent[d] &&
                    b.global_offset[d] == last.global_offset[d] + last.extent[d];
        along = static_cast<int>(d);
      }
      if (continues && along >= 0) {
        last.extent[static_cast<size_t>(along)] += b.extent[static_cast<size_t>(along)];
        continue;
      }
    }
    out.push_back(b);
  }
  return out;
}
}  // namespace

ReferenceTrainer::ReferenceTrainer(std::string_view config_json, const mlpt_component_group* group) : group_(group) {
  int64_t tp = 1, ep = 1;
  const TrainerSettings s = parse_trainer_settings(config_json, "trainer qwen35_cpu", [&](Settings& extra) {
    share_prefixes_ = extra.boolean_or("share_prefixes", true);
    tp = extra.integer_or("tensor_parallel", 1, 1);
    ep = extra.integer_or("expert_parallel", 1, 1);
  });
  group_.split_model_parallel(static_cast<int>(tp), static_cast<int>(ep));
  checkpoint_ = s.checkpoint;
  micro_batch_tokens_ = s.micro_batch_tokens;
  optimizer_ = s.optimizer;
  loss_ = s.loss;
  threads_ = static_cast<int>(s.threads);
  weights_ = group_.shard().sharded() ? load_shard_weights<float>(checkpoint_, group_.shard()) : load_weights<float>(checkpoint_);
  config_ = weights_.config;
  full_config_ = group_.shard().sharded() ? load_checkpoint_config(checkpoint_) : config_;
  valid_vocab_ = sampling_vocab_size(config_, checkpoint_, s.sampling_vocab_size);
  m_ = zeros_like(weights_);
  v_ = zeros_like(weights_);
  grads_ = zeros_like(weights_);
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

// The ranks of a model-parallel group hold parts of one model and must train the same batch share:
// with different shares each rank would compute a different model's step and the sums would mix
// them silently. Each rank compares its share's fingerprint with the group's (a sum of equal values
// is the count times the value), so every rank of a mismatched group refuses, and none waits.
void ReferenceTrainer::check_same_share(const mlpt_train_batch& b) const {
  const int64_t n = b.offsets[b.num_sequences];
  uint64_t h = sdk::xxhash64(b.offsets, sizeof(int64_t) * (b.num_sequences + 1));
  h = sdk::xxhash64(b.tokens, sizeof(int32_t) * n, h);
  h = sdk::xxhash64(b.advantages, sizeof(float) * b.num_sequences, h);
  const double mine[2] = {double(h >> 40), double((h >> 16) & 0xFFFFFF)};  // exact in a double, and in sums
  double tensor[2] = {mine[0], mine[1]}, expert[2] = {mine[0], mine[1]};
  group_.sum_tensor_parallel(tensor, 2);
  group_.sum_expert_parallel(expert, 2);
  const int tp = group_.shard().tp, ep = group_.shard().ep;
  for (int i = 0; i < 2; ++i)
    if (tensor[i] != tp * mine[i] || expert[i] != ep * mine[i])
      throw Error(MLPT_INVALID_ARGUMENT,
                  "trainer group rank " + std::to_string(group_.rank()) + ": the ranks of its model-parallel group (tensor_parallel " +
                      std::to_string(tp) + " x expert_parallel " + std::to_string(ep) +
                      ") were given different batch shares; every rank of such a group must train the same share "
                      "(split the batch by data-parallel rank, group rank / (tensor_parallel * expert_parallel))");
}

void ReferenceTrainer::train_step(mlpt_train_step_args& args) {
  const mlpt_train_batch& b = *args.batch;
  const cpu::CoreLease cores(cpu::Phase::train, threads_);  // the process's core budget, for this step
  check_train_batch(b, config_, true);
  if (group_.shard().sharded()) check_same_share(b);
  const int64_t N = b.offsets[b.num_sequences], H = config_.hidden_size, V = config_.vocab_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  const PrefixGroups groups = find_prefix_groups(b);
  const PrefixGroups* shared = share_prefixes_ ? &groups : nullptr;
  std::vector<MicroBatch> mbs = split_micro_batches(b, micro_batch_tokens_, true, shared);

  // Pass 1: forward every micro-batch once under the current weights for logp_prev of the scored
  // tokens. Micro-batches that train also keep their layer inputs, the experts used (recorded, or
  // replayed from the engine) and the final hidden states for pass 2.
  struct Saved {
    PackedMicroBatch packed;
    ForwardBatch<float> fb;
    std::vector<float> layer_inputs, hidden;
    std::vector<int16_t> experts;
    std::vector<ScoredRow> rows;
  };
  std::vector<Saved> saved(mbs.size());
  std::vector<double> prev(static_cast<size_t>(N), 0.0);
  std::vector<float> logits(kHeadBlock * V), block_hidden(kHeadBlock * H);
  // Gathers rows[r0, r0 + n) of `hidden` into block_hidden and runs the head on them.
  auto head_block = [&](const Saved& sv, size_t r0, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(sv.hidden.data() + sv.rows[r0 + i].row * H, H, block_hidden.data() + i * H);
    lm_head_forward(weights_, n, block_hidden.data(), logits.data());
  };
  int64_t computed_tokens = 0, head_rows = 0, shared_tokens = 0;
  for (size_t k = 0; k < mbs.size(); ++k) {
    Saved& sv = saved[k];
    sv.packed = pack_micro_batch(b, mbs[k], shared);
    sv.fb = forward_batch(sv.packed);
    const int64_t n = sv.fb.num_tokens();
    if (mbs[k].trains) {
      sv.experts.resize(static_cast<size_t>(n * per));
      sv.fb.routed_experts = sv.experts.data();
      sv.fb.layer_inputs = &sv.layer_inputs;
    }
    sv.hidden = forward_hidden(weights_, sv.fb);
    sv.fb.routed_experts = nullptr;
    sv.fb.layer_inputs = nullptr;
    sv.rows = scored_rows(b, mbs[k], sv.packed);
    const int32_t* tokens = b.tokens + mbs[k].first_token;  // the micro-batch's tokens as sequences
    for (size_t r0 = 0; r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      head_block(sv, r0, rows);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = sv.rows[r0 + i].t;
        prev[mbs[k].first_token + t + 1] = token_logprob(logits.data() + i * V, valid_vocab_, tokens[t + 1]);
      }
    }
    computed_tokens += n;
    shared_tokens += (mbs[k].end_token - mbs[k].first_token) - n;
    head_rows += static_cast<int64_t>(sv.rows.size());
    if (!mbs[k].trains) sv = Saved{};
  }

  const int64_t global_loss_tokens =
      sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_train_step_args, global_num_loss_tokens)) ? args.global_num_loss_tokens : 0;
  LossPlan plan = plan_loss(b, prev, loss_, global_loss_tokens, [this](int64_t n) { return group_.sum(n); });

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
    const int32_t* tokens = b.tokens + mbs[k].first_token;
    std::vector<float> d_hidden(static_cast<size_t>(n * H), 0.0f);
    bool any_gradient = false;
    for (size_t r0 = 0; r0 < sv.rows.size(); r0 += kHeadBlock) {
      const int64_t rows = std::min<int64_t>(kHeadBlock, static_cast<int64_t>(sv.rows.size() - r0));
      bool any = false, computed = false;
      std::fill(dlogits.begin(), dlogits.begin() + rows * V, 0.0f);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = sv.rows[r0 + i].t;
        const int64_t gt = mbs[k].first_token + t + 1;  // the predicted token, global index
        if (plan.weight[gt] == 0.0) continue;
        if (!computed) {
          head_block(sv, r0, rows);
          computed = true;
        }
        const float* l = logits.data() + i * V;
        double lp = token_logprob(l, valid_vocab_, tokens[t + 1]);
        TokenLoss tl = token_loss(plan.weight[gt], lp, prev[gt], loss_);
        total_loss += tl.loss;
        if (tl.grad == 0.0) continue;
        any = true;
        // d loss / d logits = grad · (onehot − softmax) over the real vocabulary.
        double lse = static_cast<double>(l[tokens[t + 1]]) - lp;
        float* dl = dlogits.data() + i * V;
        for (int64_t v = 0; v < valid_vocab_; ++v)
          dl[v] = static_cast<float>(-tl.grad * std::exp(static_cast<double>(l[v]) - lse));
        dl[tokens[t + 1]] += static_cast<float>(tl.grad);
      }
      if (!any) continue;
      any_gradient = true;
      cpu::linear_backward_input(rows, V, H, dlogits.data(), weights_[weights_.layout.lm_head], d_block.data(), false);
      for (int64_t i = 0; i < rows; ++i) {
        float* to = d_hidden.data() + sv.rows[r0 + i].row * H;
        for (int64_t j = 0; j < H; ++j) to[j] += d_block[i * H + j];
      }
      cpu::linear_backward_weight(rows, V, H, dlogits.data(), block_hidden.data(), grads_[weights_.layout.lm_head]);
    }
    // A micro-batch whose every coefficient came out 0 (TIS- or error-masked) has a zero gradient.
    if (any_gradient) {
      backward(weights_, sv.fb, sv.layer_inputs, sv.experts.data(), d_hidden.data(), grads_, options);
      backward_tokens += n;
    }
    sv = Saved{};  // free this micro-batch's activations
  }

  // Data parallel: the group's gradient is the sum of its ranks' (each normalised by the global
  // N_tok), and so are the loss and the counts the metrics report.
  if (group_.data_parallel_size() > 1) {
    for (size_t i = 0; i < grads_.values.size(); ++i)
      if (trainable_[i]) group_.sum(grads_.values[i].data(), grads_.values[i].size());
    double totals[] = {total_loss,
                       static_cast<double>(plan.num_tokens),
                       static_cast<double>(plan.sequences),
                       static_cast<double>(plan.truncated),
                       static_cast<double>(plan.logprob_error_masked),
                       static_cast<double>(plan.tis_masked),
                       static_cast<double>(computed_tokens),
                       static_cast<double>(backward_tokens),
                       static_cast<double>(head_rows),
                       static_cast<double>(shared_tokens)};
    group_.sum(totals, std::size(totals));
    total_loss = totals[0];
    plan.num_tokens = static_cast<int64_t>(totals[1]), plan.sequences = static_cast<int64_t>(totals[2]);
    plan.truncated = static_cast<int64_t>(totals[3]), plan.logprob_error_masked = static_cast<int64_t>(totals[4]);
    plan.tis_masked = static_cast<int64_t>(totals[5]);
    computed_tokens = static_cast<int64_t>(totals[6]), backward_tokens = static_cast<int64_t>(totals[7]);
    head_rows = static_cast<int64_t>(totals[8]);
    shared_tokens = static_cast<int64_t>(totals[9]);
  }
  // The last point to stop: after it the weights change, and a stopped step must leave them as they
  // were. In a group the ranks could disagree on it, so a group stops at the step's boundary instead.
  if (group_.size() == 1 && sdk::cancelled()) throw Error(MLPT_CANCELLED, "train step cancelled before the optimizer update; weights unchanged");
  double norm = global_grad_norm();
  if (!std::isfinite(norm)) throw Error(MLPT_INTERNAL, "gradient norm is not finite; weights left unchanged");
  double scale = optimizer_.grad_clip > 0 && norm > optimizer_.grad_clip ? optimizer_.grad_clip / (norm + 1e-6) : 1.0;
  ++step_;
  adamw_update(weights_, grads_, m_, v_, step_, optimizer_, scale, trainable_);
  ++version_;

  const StepWork work{mbs.size(), computed_tokens, backward_tokens, head_rows, shared_tokens};
  metrics_ = step_metrics(total_loss, norm, scale, plan, work, optimizer_.lr, step_);
  args.out_metrics = metrics_.data();
  args.out_num_metrics = metrics_.size();
  args.out_weight_version = version_;
}

double ReferenceTrainer::global_grad_norm() const {
  if (!group_.shard().sharded()) return grad_norm(grads_, trainable_);
  // Squares of replicated tensors (taken once), of tensors split over TP alone (replicated over
  // EP), and of the routed experts (split over both).
  double squares[3] = {0, 0, 0};
  const ModelLayout full = make_layout(full_config_);
  for (size_t i = 0; i < grads_.values.size(); ++i) {
    if (!trainable_[i]) continue;
    int kind = 0;
    if (weights_.layout.tensors[i].numel() != full.tensors[i].numel()) kind = 1;
    for (const LayerTensors& l : weights_.layout.layers)
      if (static_cast<int>(i) == l.moe.gate_up || static_cast<int>(i) == l.moe.down) kind = 2;
    for (float x : grads_.values[i]) squares[kind] += static_cast<double>(x) * x;
  }
  group_.sum_expert_parallel(&squares[2], 1);
  group_.sum_tensor_parallel(&squares[1], 2);
  return std::sqrt(squares[0] + squares[1] + squares[2]);
}

void ReferenceTrainer::compute_logprobs(mlpt_compute_logprobs_args& args) {
  const mlpt_train_batch& b = *args.batch;
  const cpu::CoreLease cores(cpu::Phase::train, threads_);
  check_train_batch(b, config_, false);
  if (!args.out_logprobs) throw Error(MLPT_INVALID_ARGUMENT, "out_logprobs is NULL");
  for (const MicroBatch& mb : split_micro_batches(b, micro_batch_tokens_, false)) {
    PackedMicroBatch packed = pack_micro_batch(b, mb, nullptr);  // every sequence whole: all rows are read
    ForwardBatch<float> fb = forward_batch(packed);
    ScoreResult<float> r = score_sequences(weights_, fb, valid_vocab_);
    for (int64_t t = 0; t < fb.num_tokens(); ++t) args.out_logprobs[mb.first_token + t] = static_cast<float>(r.logprobs[t]);
  }
}

void ReferenceTrainer::export_weights(mlpt_export_weights_args& args) {
  exported_ = export_named_tensors(weights_, exported_shapes_);
  if (group_.shard().sharded()) export_shards();
  args.out_tensors = exported_.data();
  args.out_num_tensors = exported_.size();
  args.out_weight_version = version_;
  if (group_.shard().sharded()) {
    if (!MLPT_HAS_FIELD(&args, mlpt_export_weights_args, out_shards))
      throw Error(MLPT_FAILED_PRECONDITION, "a model-parallel trainer exports shards: the host must know out_shards (ABI 1.2)");
    args.out_shards = exported_shards_.data();
  }
}

// Replaces the whole-tensor views of export_named_tensors by this rank's boxes (those that continue
// each other joined): a view where a tensor is one box, a copy of each box where it holds several.
void ReferenceTrainer::export_shards() {
  std::vector<ShardPlacement> placements = shard_placements(full_config_, weights_.layout, group_.shard());
  for (ShardPlacement& p : placements) p.boxes = joined(p.boxes);
  std::vector<mlpt_named_tensor> whole = std::move(exported_);
  std::vector<std::vector<int64_t>> shapes;
  exported_ = {};
  exported_global_.clear(), exported_offsets_.clear(), exported_copies_.clear(), exported_shards_.clear();
  std::vector<size_t> tensor_of, copy_of;  // per box: its tensor, and its copy (or SIZE_MAX: a view)
  for (size_t i = 0; i < placements.size(); ++i) {
    const bool view = placements[i].boxes.size() == 1;
    for (const ShardBox& box : placements[i].boxes) {
      tensor_of.push_back(i);
      shapes.push_back(box.extent);
      exported_global_.push_back(placements[i].global_shape);
      exported_offsets_.push_back(box.global_offset);
      copy_of.push_back(view ? SIZE_MAX : exported_copies_.size());
      if (view) continue;
      int64_t n = 1;
      for (int64_t e : box.extent) n *= e;
      exported_copies_.emplace_back(static_cast<size_t>(n));
      copy_local_box(weights_.values[i].data(), weights_.layout.tensors[i].shape, box, exported_copies_.back().data());
    }
  }
  exported_shapes_ = std::move(shapes);  // every vector is complete: the pointers below stay valid
  for (size_t k = 0; k < tensor_of.size(); ++k) {
    mlpt_named_tensor t = whole[tensor_of[k]];
    t.tensor.shape = exported_shapes_[k].data();
    if (copy_of[k] != SIZE_MAX) t.tensor.data = exported_copies_[copy_of[k]].data();
    exported_.push_back(t);
    exported_shards_.push_back(mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, exported_global_[k].data(), exported_offsets_[k].data()});
  }
}

StateRanks ReferenceTrainer::state_ranks() const {
  return StateRanks{full_config_, group_.shard(), group_.model_group(), group_.data_parallel_rank() == 0, group_.rank(),
                    group_.data_parallel_size(), [this](bool ok) { return group_.all_ok(ok); }};
}

void ReferenceTrainer::save_state(std::string_view path) {
  save_trainer_state(std::string(path), checkpoint_, weights_, m_, v_, step_, version_, state_ranks());
}

void ReferenceTrainer::load_state(std::string_view path) {
  // Every rank reads its own slices; the group keeps its old state unless all of them could.
  TrainerState st;
  std::exception_ptr error;
  try {
    st = load_trainer_state(std::string(path), weights_, state_ranks());
  } catch (...) {
    error = std::current_exception();
  }
  if (!group_.all_ok(!error)) {
    if (error) std::rethrow_exception(error);
    throw Error(MLPT_ABORTED, "load_state " + std::string(path) +
                                  ": another rank of the trainer group could not read its part (its error says why); the state is unchanged");
  }
  weights_ = std::move(st.weights);
  m_ = std::move(st.m);
  v_ = std::move(st.v);
  step_ = st.step;
  version_ = st.version;
}

}  // namespace mlpt::ref
