#include "device_model/vocab_head.hpp"

#include <algorithm>

namespace mlpt::ref::dev {

namespace {
constexpr int64_t kStats = 4;  // per row and rank: max, Σ exp(l − max), target logit, holds target
}  // namespace

VocabHead::VocabHead(const ModelConfig& c, Communicator* tensor, int64_t valid, VocabScratch* scratch)
    : range_(vocab_range(c.vocab_size, c.shard)),
      vocab_(c.vocab_size),
      valid_(valid),
      group_(range_.count() < c.vocab_size && tensor && tensor->size() > 1 ? tensor : nullptr),
      s_(scratch ? *scratch : own_) {}

std::vector<int32_t> vocab_local_ids(const VocabRange& range, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    out[i] = range.holds(ids[i]) ? static_cast<int32_t>(ids[i] - range.begin) : -1;
  return out;
}

void VocabHead::logprobs(Ops& ops, int64_t rows, const float* logits, const int32_t* local_targets,
                         float* logprob, float* lse) {
  const int64_t mine = std::clamp<int64_t>(valid_ - range_.begin, 0, width());  // this range's real ids
  if (!group_) return ops.token_logprobs(rows, width(), mine, logits, local_targets, logprob, lse);
  if (rows == 0) return;
  const size_t tp = static_cast<size_t>(group_->size()), per_rank = static_cast<size_t>(rows * kStats);
  float* stats = take<float>(ops, s_.stats, rows * kStats);
  float* all = take<float>(ops, s_.gathered, static_cast<int64_t>(tp * per_rank));
  ops.vocab_logprob_stats(rows, width(), mine, logits, local_targets, stats);
  const std::vector<size_t> counts(tp, per_rank);
  group_->all_gather_v(stats, per_rank, all, counts.data());
  ops.vocab_logprob_combine(rows, static_cast<int64_t>(tp), all, logprob, lse);
}

void VocabHead::logprobs_backward(Ops& ops, int64_t rows, const float* logits, const float* lse,
                                  const int32_t* local_targets, const float* coef, bf16* dlogits) {
  const int64_t mine = std::clamp<int64_t>(valid_ - range_.begin, 0, width());
  ops.token_logprobs_backward(rows, width(), mine, logits, lse, local_targets, coef, dlogits);
}

void VocabHead::sum_input_gradient(Ops& ops, bf16* d_hidden, int64_t n) {
  if (!group_ || n == 0) return;
  float* wide = take<float>(ops, s_.wide, n);
  ops.to_float(n, d_hidden, wide);
  group_->all_reduce_sum(wide, size_t(n));
  ops.to_bf16(n, wide, d_hidden);
}

const float* VocabHead::whole_rows(Ops& ops, int64_t rows, const float* logits) {
  if (!group_ || rows == 0) return logits;
  const int tp = group_->size();
  std::vector<size_t> counts(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) counts[size_t(r)] = size_t(rows * vocab_range(vocab_, tp, r).count());
  float* parts = take<float>(ops, s_.gathered, rows * vocab_);
  group_->all_gather_v(logits, counts[size_t(group_->rank())], parts, counts.data());
  float* whole = take<float>(ops, s_.whole, rows * vocab_);
  for (int r = 0; r < tp; ++r) {  // rank r's [rows, count] slice into columns [begin, end) of each row
    const VocabRange part = vocab_range(vocab_, tp, r);
    ops.copy_rows(whole + part.begin, size_t(vocab_) * 4, parts, size_t(part.count()) * 4,
                  size_t(part.count()) * 4, rows);
    parts += rows * part.count();
  }
  return whole;
}

}  // namespace mlpt::ref::dev
