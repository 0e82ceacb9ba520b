// The engine's model step on the device model (generation with per-sequence state): a packed batch of
// sequences, each continuing from its own DeviceSequenceState (GDN state and conv windows, fixed
// size) and KV blocks handed out by a KvBlockPool, through forward_hidden (model.hpp), then the LM
// head and sampling through the ops for the segments whose last token is to be followed by a new one.
#pragma once

#include <cstdint>
#include <vector>

#include "device_model/model.hpp"
#include "device_model/vocab_head.hpp"
#include "model/kv_blocks.hpp"

namespace mlpt::ref::dev {

// A KvCache whose blocks are lent to sequences, shared by their copies where filled
// (model/kv_blocks.hpp). Thread-safe (sequences die on any thread).
class KvBlockPool : public KvBlockLedger {
 public:
  KvBlockPool(Ops& ops, const ModelConfig& c, int64_t num_blocks, int64_t block_size);
  KvCache& cache() { return cache_; }

 private:
  KvCache cache_;
};

// Copies the first `tokens` positions of the keys and values in blocks `from` into blocks `to`
// (same block size; `to` already reserved), every attention layer.
void copy_kv(Ops& ops, const ModelConfig& c, KvCache& kv, const std::vector<int32_t>& from,
             const std::vector<int32_t>& to, int64_t tokens);

// Which segments sample a token after the step, with what.
struct SampleRows {
  std::vector<size_t> segment;      // segment whose last token's logits are sampled
  std::vector<SamplingRow> params;  // per row
  std::vector<bool> host_logits;    // per row: also return its logits to the host (e.g. top-k)
};

struct StepResult {
  std::vector<int32_t> tokens;  // per sample row (drawn on the device)
  std::vector<float> logprobs;  // per sample row, under the distribution drawn from
  std::vector<float> logits;    // [rows with host_logits, V] fp32, in row order
};

// Buffers of generate_step, reused across steps.
struct StepScratch {
  Buffer hidden, rows, row_ids, logits, params, tokens, logprobs;
  VocabScratch head;
};

// One engine step: batch.states (every segment has one, with KV blocks reserved for its new
// tokens) advance by their segments; routed experts recorded when batch.routed_experts. Then
// per sample row the last token's logits, sampled over [0, valid). On a vocabulary-parallel shard
// each TP rank computes its range's logits and the sampled rows are gathered whole, so every rank
// draws what one rank draws. Synchronous.
StepResult generate_step(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, const SampleRows& rows,
                         int64_t valid, Workspace& ws, StepScratch& scratch);

}  // namespace mlpt::ref::dev
