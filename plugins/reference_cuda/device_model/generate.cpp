#include "device_model/generate.hpp"

#include <algorithm>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::dev {

KvBlockPool::KvBlockPool(Ops& ops, const ModelConfig& c, int64_t num_blocks, int64_t block_size)
    : KvBlockLedger(num_blocks, block_size), cache_(ops, c, num_blocks, block_size) {}

void copy_kv(Ops& ops, const ModelConfig& c, KvCache& kv, const std::vector<int32_t>& from,
             const std::vector<int32_t>& to, int64_t tokens) {
  const int64_t n = (tokens + kv.block_size - 1) / kv.block_size;
  if (static_cast<int64_t>(from.size()) < n || static_cast<int64_t>(to.size()) < n)
    throw sdk::Error(MLPT_INTERNAL, "copy_kv: " + std::to_string(tokens) + " tokens need " +
                                        std::to_string(n) + " blocks on both sides");
  const size_t block = size_t(kv.block_size * c.num_kv_heads * c.head_dim) * sizeof(bf16);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.attention_layer[l]) continue;
    for (Buffer* pool : {&kv.k[l], &kv.v[l]}) {
      char* base = pool->as<char>();
      for (int64_t b = 0; b < n; ++b)
        ops.copy(base + size_t(to[b]) * block, base + size_t(from[b]) * block, block);
    }
  }
}

StepResult generate_step(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, const SampleRows& rows,
                         int64_t valid, Workspace& ws, StepScratch& s) {
  const ModelConfig& c = w.config;
  const size_t R = rows.segment.size();
  if (rows.params.size() != R || rows.host_logits.size() != R)
    throw sdk::Error(MLPT_INTERNAL, "generate_step: sample rows disagree in length");
  for (size_t seg : rows.segment)
    if (seg >= batch.num_segments() || batch.offsets[seg + 1] == batch.offsets[seg])
      throw sdk::Error(MLPT_INTERNAL, "generate_step: sample row names segment " + std::to_string(seg) +
                                          ", which has no tokens in this step");
  for (auto* st : batch.states)
    if (!st) throw sdk::Error(MLPT_INTERNAL, "generate_step: every segment needs its sequence state");
  forward_hidden(ops, w, batch, ws, s.hidden, nullptr);
  StepResult out;
  if (R == 0) return out;
  const int64_t H = c.hidden_size, V = c.vocab_size, n = static_cast<int64_t>(R);
  // The last token of each sampling segment: a row gather (the embedding op, over hidden).
  std::vector<int32_t> ids(R);
  for (size_t r = 0; r < R; ++r) ids[r] = static_cast<int32_t>(batch.offsets[rows.segment[r] + 1] - 1);
  const int32_t* row_ids = upload(ops, s.row_ids, ids);
  bf16* last = take<bf16>(ops, s.rows, n * H);
  ops.embedding_forward(n, H, row_ids, s.hidden.as<bf16>(), last);
  VocabHead head(c, batch.parallel ? batch.parallel->tensor : nullptr, valid, &s.head);
  float* mine = take<float>(ops, s.logits, n * head.width());  // this rank's LM-head rows' logits
  ops.logits_forward(n, head.width(), H, last, w.bf(w.layout.lm_head), mine);
  const float* logits = head.whole_rows(ops, n, mine);
  const SamplingRow* params = upload(ops, s.params, rows.params);
  int32_t* tokens = take<int32_t>(ops, s.tokens, n);
  float* logprobs = take<float>(ops, s.logprobs, n);
  ops.sample_tokens(n, V, valid, logits, params, tokens, logprobs);
  out.tokens.resize(R);
  out.logprobs.resize(R);
  ops.to_host(out.tokens.data(), tokens, R * 4);
  ops.to_host(out.logprobs.data(), logprobs, R * 4);
  const size_t kept = static_cast<size_t>(std::count(rows.host_logits.begin(), rows.host_logits.end(), true));
  out.logits.resize(kept * size_t(V));
  for (size_t r = 0, j = 0; r < R; ++r)
    if (rows.host_logits[r])
      ops.to_host(out.logits.data() + (j++) * size_t(V), logits + r * size_t(V), size_t(V) * 4);
  return out;
}

}  // namespace mlpt::ref::dev
