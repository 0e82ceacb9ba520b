#include "engine/cpu_backend.hpp"

#include <algorithm>

#include "backends/cpu/threads.hpp"
#include "model/named_tensors.hpp"

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

CpuEngineBackend::CpuEngineBackend(sdk::Settings& s, const std::string& checkpoint, bool chunked_prefill) {
  threads_ = static_cast<int>(s.integer_or("threads", 1, 1));
  s.reject_unknown();
  prefill_mode_ = chunked_prefill ? GdnMode::chunked : GdnMode::recurrent;
  auto w = std::make_shared<Weights<float>>(::mlpt::ref::load_weights<float>(checkpoint));
  config_ = w->config;
  weights_ = std::move(w);
}

std::unique_ptr<SequenceState> CpuEngineBackend::new_state() { return std::make_unique<CpuState>(config_); }

// Host memory only (import_named_tensors refuses device tensors), so `ready` says nothing here.
void CpuEngineBackend::load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& /*ready*/) {
  auto w = std::make_shared<const Weights<float>>(import_named_tensors(config_, tensors, count));
  std::lock_guard lk(mutex_);
  weights_ = std::move(w);
}

void CpuEngineBackend::step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing,
                            StepOutput& out) {
  const cpu::CoreLease cores(cpu::Phase::generate, threads_);  // what a running train step leaves
  std::shared_ptr<const Weights<float>> w;
  {
    std::lock_guard lk(mutex_);
    w = weights_;
  }
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
  out.routing.assign(record_routing ? tokens.size() * static_cast<size_t>(per) : 0, 0);
  if (record_routing) fb.routed_experts = out.routing.data();
  const std::vector<float> hidden = forward_hidden(*w, fb);

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

CpuEngine::CpuEngine(std::string_view config_json)
    : ReferenceEngine(config_json, "engine qwen35_cpu", [](sdk::Settings& s, const std::string& dir, bool chunked) {
        return std::make_unique<CpuEngineBackend>(s, dir, chunked);
      }) {}

}  // namespace mlpt::ref
