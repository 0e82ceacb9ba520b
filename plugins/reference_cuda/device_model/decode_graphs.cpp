#include "device_model/decode_graphs.hpp"

#include <algorithm>
#include <cstring>

#include "device_model/backend_options.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::dev {

struct DecodeGraphs::Bucket {
  explicit Bucket(int64_t n) : size(n) {}
  int64_t size;
  WorkspacePtr ws = make_workspace();
  Buffer hidden, logits, params;
  Buffer drawn;  // the sampler's tokens [n] int32, then their logprobs [n] fp32: one copy to the host
  std::vector<int16_t> record;  // host: where forward_staged is told to record
  std::unique_ptr<RecordedWork> recording;
  std::optional<RecordingKey> key;  // set once recorded (or, without a recorder, once run)
};

DecodeGraphs::DecodeGraphs(Ops& ops, const ModelConfig& c, KvBlockPool& pool, int64_t max_batch)
    : ops_(ops), pool_(pool), buckets_(decode_buckets(max_batch)), pad_(ops, c) {
  if (buckets_.back() > kAllExpertsMaxRows)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "decode graphs: batches above " + std::to_string(kAllExpertsMaxRows) +
                         " sequences size their experts on the host; asked for " + std::to_string(max_batch));
  pool_.reserve(pad_.blocks, 1);
}

DecodeGraphs::~DecodeGraphs() {
  pool_.release(pad_.blocks);
}

std::string DecodeGraphs::refusal(const DeviceBatch& b) const {
  const size_t S = b.num_segments();
  if (b.parallel) return "a model-parallel step (its sums and dispatch go through the host)";
  if (b.replay_experts) return "replayed routing";
  if (!b.kv) return "no KV cache";
  if (S == 0 || S > size_t(buckets_.back()))
    return std::to_string(S) + " sequences (buckets hold 1 to " + std::to_string(buckets_.back()) + ")";
  if (b.states.size() != S) return "a segment without its sequence state";
  for (size_t s = 0; s < S; ++s) {
    if (!b.states[s]) return "segment " + std::to_string(s) + " without its sequence state";
    if (b.offsets[s + 1] - b.offsets[s] != 1)
      return "segment " + std::to_string(s) + " has " + std::to_string(b.offsets[s + 1] - b.offsets[s]) +
             " tokens (decode steps have one)";
  }
  return "";
}

DecodeGraphs::Bucket& DecodeGraphs::bucket_for(int64_t size) {
  for (auto& b : by_size_)
    if (b->size == size) return *b;
  by_size_.push_back(std::make_unique<Bucket>(size));
  return *by_size_.back();
}

RecordingKey DecodeGraphs::key_for(const DeviceWeights& w, const KvCache& kv, int64_t width,
                                   int64_t valid) const {
  RecordingKey key{{}, width, valid};
  for (const Buffer& t : w.tensors) key.addresses.push_back(t.get());
  for (size_t l = 0; l < kv.k.size(); ++l)
    key.addresses.insert(key.addresses.end(), {kv.k[l].get(), kv.v[l].get()});
  if (WorkRecorder* r = ops_.recorder())
    for (const void* p : r->scratch_addresses()) key.addresses.push_back(p);
  return key;
}

void DecodeGraphs::queue_head(const DeviceWeights& w, Bucket& b, int64_t valid) {
  const ModelConfig& c = w.config;
  const int64_t n = b.size, V = c.vocab_size;
  float* logits = take<float>(ops_, b.logits, n * V);
  ops_.logits_forward(n, V, c.hidden_size, b.hidden.as<bf16>(), w.bf(w.layout.lm_head), logits);
  int32_t* tokens = take<int32_t>(ops_, b.drawn, 2 * n);
  ops_.sample_tokens(n, V, valid, logits, b.params.as<SamplingRow>(), tokens,
                     reinterpret_cast<float*>(tokens + n));
}

std::unique_ptr<RecordedWork> DecodeGraphs::record(const DeviceWeights& w, const DeviceBatch& padded,
                                                   Bucket& bk, int64_t valid,
                                                   const std::function<void()>& reset_pad) {
  WorkRecorder& recorder = *ops_.recorder();
  bool began = false;
  try {
    forward_staged(ops_, w, padded, *bk.ws, &bk.hidden, [&] {
      recorder.begin_recording();
      began = true;
      reset_pad();
    });
    queue_head(w, bk, valid);
  } catch (...) {
    if (began) try {
        recorder.end_recording();  // abandons it: the stream runs work again
      } catch (...) {
      }
    throw;
  }
  return recorder.end_recording();
}

StepResult DecodeGraphs::step(const DeviceWeights& w, const DeviceBatch& batch, const SampleRows& rows,
                              int64_t valid) {
  if (const std::string why = refusal(batch); !why.empty())
    throw sdk::Error(MLPT_INTERNAL, "decode graphs: cannot run " + why);
  const size_t R = rows.segment.size(), S = batch.num_segments();
  if (rows.params.size() != R || rows.host_logits.size() != R)
    throw sdk::Error(MLPT_INTERNAL, "decode graphs: sample rows disagree in length");
  for (size_t seg : rows.segment)
    if (seg >= S)
      throw sdk::Error(MLPT_INTERNAL, "decode graphs: sample row names segment " + std::to_string(seg));
  const ModelConfig& c = w.config;
  const int64_t B = choose_bucket(buckets_, static_cast<int64_t>(S));
  Bucket& bk = bucket_for(B);

  // The step padded to its bucket: pad rows continue the pad sequence, from zero, at position 0.
  int64_t blocks = 1;
  for (const DeviceSequenceState* st : batch.states)
    blocks = std::max(blocks, static_cast<int64_t>(st->blocks.size()));
  DeviceBatch padded;
  padded.tokens = batch.tokens;
  padded.tokens.resize(size_t(B), 0);
  padded.offsets.resize(size_t(B) + 1);
  for (int64_t i = 0; i <= B; ++i) padded.offsets[size_t(i)] = i;
  pad_.length = 0;
  padded.states = batch.states;
  padded.states.resize(size_t(B), &pad_);
  padded.kv = batch.kv;
  padded.chunked = false;
  padded.table_width = table_width(blocks);
  bk.record.resize(size_t(B * c.num_layers * c.experts_per_token));
  padded.routed_experts = bk.record.data();  // always: one shape of work per bucket
  std::vector<SamplingRow> params(size_t(B), SamplingRow{1.f, 1.f, 0, 0});
  for (size_t r = 0; r < R; ++r) params[rows.segment[r]] = rows.params[r];
  auto reset_pad = [&] {
    for (size_t l = 0; l < pad_.conv.size(); ++l)
      if (pad_.state[l].get()) {
        ops_.zero(pad_.conv[l].get(), pad_.conv[l].bytes());
        ops_.zero(pad_.state[l].get(), pad_.state[l].bytes());
      }
  };

  WorkRecorder* recorder = ops_.recorder();
  RecordableForms recordable(ops_);
  if (bk.key && *bk.key != key_for(w, *batch.kv, padded.table_width, valid)) {
    ++stats_.invalidated;  // weights reallocated, scratch moved or the table widened
    bk.recording.reset();
    bk.key.reset();
  }
  upload(ops_, bk.params, params);
  if (bk.key && bk.recording) {
    stage_forward(ops_, w, padded, *bk.ws);
    bk.recording->replay();
    ++stats_.replayed;
  } else {
    forward_staged(ops_, w, padded, *bk.ws, &bk.hidden, reset_pad);  // sizes the workspace, computes the step
    queue_head(w, bk, valid);
    ++stats_.unrecorded;
    if (!bk.key) {
      if (recorder) {  // the same work again, recorded (not run): every buffer now has its size
        try {
          bk.recording = record(w, padded, bk, valid, reset_pad);
        } catch (const std::exception&
                     e) {  // this step is computed; the bucket runs unrecorded until its key changes
          ++stats_.failed;
          stats_.failure = e.what();
        }
      }
      bk.key = key_for(w, *batch.kv, padded.table_width, valid);  // after the scratch took its size
      ++stats_.recorded;
    }
  }

  StepResult out;
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  std::vector<float> logprobs(static_cast<size_t>(B));
  std::vector<int32_t> drawn(2 * static_cast<size_t>(B));
  ops_.to_host(drawn.data(), bk.drawn.get(), drawn.size() * 4);  // the step's one wait
  std::memcpy(tokens.data(), drawn.data(), size_t(B) * 4);
  std::memcpy(logprobs.data(), drawn.data() + B, size_t(B) * 4);
  const size_t V = size_t(c.vocab_size);
  for (size_t r = 0; r < R; ++r) {
    out.tokens.push_back(tokens[rows.segment[r]]);
    out.logprobs.push_back(logprobs[rows.segment[r]]);
    if (!rows.host_logits[r]) continue;
    out.logits.resize(out.logits.size() + V);
    ops_.to_host(out.logits.data() + out.logits.size() - V, bk.logits.as<float>() + rows.segment[r] * V,
                 V * 4);
  }
  if (batch.routed_experts && !bk.record.empty())
    ops_.to_host(batch.routed_experts, routing_record(*bk.ws),
                 S * size_t(c.num_layers * c.experts_per_token) * sizeof(int16_t));
  for (size_t s = 0; s < S; ++s) batch.states[s]->length += 1;
  return out;
}

}  // namespace mlpt::ref::dev
