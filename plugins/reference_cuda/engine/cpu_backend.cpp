#include "engine/cpu_backend.hpp"

#include <utility>

#include "backends/cpu/threads.hpp"
#include "model/named_tensors.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {
class CpuState final : public SequenceState {
 public:
  explicit CpuState(const ModelConfig& c) : cache(c) {}
  size_t bytes() const override { return cache.bytes(); }
  std::unique_ptr<SequenceState> clone() const override { return std::make_unique<CpuState>(*this); }
  SequenceCache<float> cache;
};
}  // namespace

CpuEngineBackend::CpuEngineBackend(sdk::Settings& s, const std::string& checkpoint, bool chunked_prefill,
                                   const mlpt_component_group* component_group)
    : GroupBackend(s) {
  threads_ = static_cast<int>(s.integer_or("threads", 1, 1));
  s.reject_unknown();
  prefill_mode_ = chunked_prefill ? GdnMode::chunked : GdnMode::recurrent;
  join(component_group);
  // Every rank loads its shard; a rank that cannot fails the create on all (none waits forever).
  prepare_together(checkpoint, [&] {
    if (!grouped()) {
      weights_ = std::make_shared<Weights<float>>(::mlpt::ref::load_weights<float>(checkpoint));
      config_ = shard_config_ = weights_->config;
      return;
    }
    config_ = load_checkpoint_config(checkpoint);
    auto w = std::make_shared<Weights<float>>(load_shard_weights<float>(checkpoint, group().shard()));
    shard_config_ = w->config;
    describe_shard(config_, *w);
    weights_ = std::move(w);
  });
}

std::unique_ptr<SequenceState> CpuEngineBackend::new_shard_state() { return std::make_unique<CpuState>(shard_config_); }

std::shared_ptr<const Weights<float>> CpuEngineBackend::current_weights() {
  std::lock_guard lk(mutex_);
  return weights_;
}

std::function<void()> CpuEngineBackend::prepare_weights(Weights<float> weights) {
  auto w = std::make_shared<const Weights<float>>(std::move(weights));
  return [this, w] {
    std::lock_guard lk(mutex_);
    weights_ = w;
  };
}

// Host memory only (import_named_tensors refuses device tensors), so `ready` says nothing here.
void CpuEngineBackend::load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& /*ready*/) {
  prepare_weights(import_named_tensors(config_, tensors, count))();
}

void CpuEngineBackend::run_step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing,
                                StepOutput& out, const GroupForward& together) {
  const cpu::CoreLease cores(cpu::Phase::generate, threads_);  // what a running train step leaves
  const std::shared_ptr<const Weights<float>> w = current_weights();
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  const int64_t per = config_.num_moe_layers() * config_.experts_per_token;
  ForwardBatch<float> fb;
  std::vector<int32_t> tokens;
  for (const StepSegment& g : segments) {
    tokens.insert(tokens.end(), g.tokens.begin(), g.tokens.end());
    fb.offsets.push_back(static_cast<int64_t>(tokens.size()));
    fb.caches.push_back(&static_cast<CpuState*>(g.state)->cache);
  }
  fb.tokens = tokens.data();
  fb.gdn_mode = prefill_mode_;
  if (grouped()) fb.parallel = &group().model_parallel();
  out.routing.assign(record_routing ? tokens.size() * static_cast<size_t>(per) : 0, 0);
  if (record_routing) fb.routed_experts = out.routing.data();
  std::vector<float> hidden;
  const VocabRange vocab = vocab_range(V, w->config.shard);
  if (vocab.count() < V) return sample_split_vocabulary(*w, fb, segments, valid, out, together);
  together([&] { hidden = forward_hidden(*w, fb); });

  std::vector<const StepSegment*> sampled;
  std::vector<float> rows;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].sample) continue;
    const int64_t row = fb.offsets[s + 1] - 1;
    rows.insert(rows.end(), hidden.begin() + row * H, hidden.begin() + (row + 1) * H);
    sampled.push_back(&segments[s]);
  }
  std::vector<float> logits(sampled.size() * static_cast<size_t>(V));
  if (!sampled.empty()) lm_head_forward(*w, static_cast<int64_t>(sampled.size()), rows.data(), logits.data());
  out.sampled.clear();
  for (size_t j = 0; j < sampled.size(); ++j)
    out.sampled.push_back(sample_token(logits.data() + j * V, valid, *sampled[j]->sample, sampled[j]->counter));
}

// Only rank 0 knows which segments sample, and every TP rank holds a range of the LM head: so inside
// the group's forward every rank runs its range of the head on the last row of every segment, the
// rows are gathered whole (V floats a segment; sample_token's walk over the ids in order needs
// them all to draw exactly what one rank draws), and rank 0 samples from them.
void CpuEngineBackend::sample_split_vocabulary(const Weights<float>& w, ForwardBatch<float>& fb,
                                               const std::vector<StepSegment>& segments, int64_t valid,
                                               StepOutput& out, const GroupForward& together) {
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  std::vector<int64_t> row_of(segments.size(), -1);  // each segment's row among the head's
  std::vector<float> whole;
  together([&] {
    const std::vector<float> hidden = forward_hidden(w, fb);
    std::vector<float> rows;
    int64_t n = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      if (fb.offsets[s + 1] == fb.offsets[s]) continue;
      const int64_t row = fb.offsets[s + 1] - 1;
      rows.insert(rows.end(), hidden.begin() + row * H, hidden.begin() + (row + 1) * H);
      row_of[s] = n++;
    }
    std::vector<float> logits(static_cast<size_t>(n * vocab_range(V, w.config.shard).count()));
    if (n > 0) lm_head_forward(w, n, rows.data(), logits.data());
    whole = gather_vocab_rows(group().model_parallel().tensor, V, n, logits.data());
  });
  out.sampled.clear();
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!segments[s].sample) continue;
    if (row_of[s] < 0)
      throw sdk::Error(MLPT_INTERNAL,
                       "engine step: segment " + std::to_string(s) + " samples but has no tokens");
    out.sampled.push_back(
        sample_token(whole.data() + row_of[s] * V, valid, *segments[s].sample, segments[s].counter));
  }
}

CpuEngine::CpuEngine(std::string_view config_json, const mlpt_component_group* group)
    : ReferenceEngine(config_json, "engine qwen35_cpu", [group](sdk::Settings& s, const std::string& dir, bool chunked) {
        return std::make_unique<CpuEngineBackend>(s, dir, chunked, group);
      }) {}

}  // namespace mlpt::ref
