#include "backends/cuda/generate.hpp"

#include <algorithm>
#include <string>

#include "backends/cuda/embedding.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda {

KvBlockPool::KvBlockPool(const ModelConfig& c, int64_t num_blocks, int64_t block_size)
    : KvBlockLedger(num_blocks, block_size), cache_(c, num_blocks, block_size) {}

void copy_kv(const Context& ctx, const ModelConfig& c, KvCache& kv, const std::vector<int32_t>& from,
             const std::vector<int32_t>& to, int64_t tokens) {
  const int64_t n = (tokens + kv.block_size - 1) / kv.block_size;
  if (static_cast<int64_t>(from.size()) < n || static_cast<int64_t>(to.size()) < n)
    throw sdk::Error(MLPT_INTERNAL, "copy_kv: " + std::to_string(tokens) + " tokens need " + std::to_string(n) +
                                        " blocks on both sides");
  const size_t block = size_t(kv.block_size * c.num_kv_heads * c.head_dim) * sizeof(bf16);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.attention_layer[l]) continue;
    for (DeviceBuffer* pool : {&kv.k[l], &kv.v[l]}) {
      char* base = pool->as<char>();
      for (int64_t b = 0; b < n; ++b)
        check(cudaMemcpyAsync(base + size_t(to[b]) * block, base + size_t(from[b]) * block, block,
                              cudaMemcpyDeviceToDevice, ctx.stream),
              "copy_kv");
    }
  }
}

namespace {
template <class T>
T* sized(DeviceBuffer& b, size_t n) {
  b.reserve(std::max<size_t>(n, 1) * sizeof(T));
  return b.as<T>();
}
template <class T>
void to_host(const Context& ctx, std::vector<T>& out, const void* src, size_t n, const char* what) {
  out.resize(n);
  if (n) check(cudaMemcpyAsync(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, ctx.stream), what);
}
}  // namespace

StepResult generate_step(const Context& ctx, const DeviceWeights& w, const DeviceBatch& batch, const SampleRows& rows,
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
  forward_hidden(ctx, w, batch, ws, s.hidden, nullptr);
  StepResult out;
  if (R == 0) return out;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  // The last token of each sampling segment: a row gather (the embedding kernel, over hidden).
  std::vector<int32_t> ids(R);
  for (size_t r = 0; r < R; ++r) ids[r] = static_cast<int32_t>(batch.offsets[rows.segment[r] + 1] - 1);
  int32_t* row_ids = sized<int32_t>(s.row_ids, R);
  check(cudaMemcpyAsync(row_ids, ids.data(), R * 4, cudaMemcpyHostToDevice, ctx.stream), "generate_step: rows");
  bf16* last = sized<bf16>(s.rows, R * size_t(H));
  embedding_forward(ctx, static_cast<int64_t>(R), H, row_ids, s.hidden.as<bf16>(), last);
  float* logits = sized<float>(s.logits, R * size_t(V));
  logits_forward(ctx, static_cast<int64_t>(R), V, H, last, w.bf(w.layout.lm_head), logits);
  SamplingRow* params = sized<SamplingRow>(s.params, R);
  check(cudaMemcpyAsync(params, rows.params.data(), R * sizeof(SamplingRow), cudaMemcpyHostToDevice, ctx.stream),
        "generate_step: sampling parameters");
  int32_t* tokens = sized<int32_t>(s.tokens, R);
  float* logprobs = sized<float>(s.logprobs, R);
  sample_tokens(ctx, static_cast<int64_t>(R), V, valid, logits, params, tokens, logprobs);
  to_host(ctx, out.tokens, tokens, R, "generate_step: tokens");
  to_host(ctx, out.logprobs, logprobs, R, "generate_step: logprobs");
  const size_t kept = static_cast<size_t>(std::count(rows.host_logits.begin(), rows.host_logits.end(), true));
  out.logits.resize(kept * size_t(V));
  for (size_t r = 0, j = 0; r < R; ++r)
    if (rows.host_logits[r])
      check(cudaMemcpyAsync(out.logits.data() + (j++) * size_t(V), logits + r * size_t(V), size_t(V) * 4,
                            cudaMemcpyDeviceToHost, ctx.stream),
            "generate_step: logits");
  // The host vectors are read after return.
  check(cudaStreamSynchronize(ctx.stream), "generate_step");
  return out;
}

}  // namespace mlpt::ref::cuda
