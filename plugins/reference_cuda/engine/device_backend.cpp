#include "engine/device_backend.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "device_model/backend_options.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/types.hpp"
#include "model/named_tensors.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"

namespace mlpt::ref {

using sdk::Error;
using sdk::operator==;

// A sequence's state: device memory only once it has taken part in a step (states are made on
// the submitting thread; the device is touched on the scheduler's). Its blocks go back to the pool.
class DeviceEngineBackend::State final : public SequenceState {
 public:
  explicit State(DeviceEngineBackend& owner) : owner_(owner) {}
  ~State() override {
    if (dev_) owner_.pool_->release(dev_->blocks);
  }
  size_t bytes() const override {  // shared KV blocks count in full for every holder: an upper bound
    if (!dev_) return 0;
    size_t b = dev_->blocks.size() * owner_.pool_->cache().bytes_per_block(owner_.weights_.config);
    for (size_t l = 0; l < dev_->conv.size(); ++l) b += dev_->conv[l].bytes() + dev_->state[l].bytes();
    return b;
  }
  std::unique_ptr<SequenceState> clone() const override { return owner_.clone(*this); }
  dev::DeviceSequenceState& device() {                              // called with the backend's lock held
    if (!dev_) dev_.emplace(owner_.ops(), owner_.weights_.config);  // this rank's heads
    return *dev_;
  }
  const std::optional<dev::DeviceSequenceState>& existing() const { return dev_; }

 private:
  DeviceEngineBackend& owner_;
  std::optional<dev::DeviceSequenceState> dev_;
};

DeviceEngineBackend::DeviceEngineBackend(
    sdk::Settings& s, const std::string& checkpoint, bool chunked_prefill,
    const mlpt_component_group* component_group, const std::string& component,
    const std::function<void(sdk::Settings&)>& platform_keys,
    const std::function<std::unique_ptr<DevicePlatform>()>& make_platform)
    : GroupBackend(s), component_(component), chunked_prefill_(chunked_prefill) {
  if (platform_keys) platform_keys(s);
  const int64_t kv_bytes = s.integer_or("kv_cache_bytes", int64_t(1) << 30, 1);
  const int64_t block = s.integer_or("kv_block_size", 16, 1);
  s.reject_unknown();
  join(component_group);  // the embedding and LM head split over the TP ranks (device_model/vocab_head.hpp)
  // Every rank readies its device and loads its shard; in a group one that cannot fails the create
  // on all (none waits forever).
  prepare_together(checkpoint, [&] {
    platform_ = make_platform();
    const Weights<float> w = grouped() ? load_shard_weights<float>(checkpoint, group().shard())
                                       : ::mlpt::ref::load_weights<float>(checkpoint);
    config_ = grouped() ? load_checkpoint_config(checkpoint) : w.config;
    if (grouped()) describe_shard(config_, w);
    weights_ = dev::upload_weights(ops(), w);
    // Every rank's shard has the same shapes, so every rank's pool the same number of blocks.
    const int64_t per_block =
        std::max<int64_t>(static_cast<int64_t>(dev::KvCache::bytes_per_block(weights_.config, block)), 1);
    const int64_t blocks = weights_.config.num_attention_layers() ? kv_bytes / per_block : 1 << 20;
    if (blocks < 1)
      s.fail("kv_cache_bytes", std::to_string(kv_bytes) + " holds no KV block of " +
                                   std::to_string(per_block) + " bytes (kv_block_size " +
                                   std::to_string(block) + ")");
    pool_ = std::make_unique<dev::KvBlockPool>(ops(), weights_.config, blocks, block);
    ws_ = dev::make_workspace();
    if (platform_->decode_graphs() && !grouped())
      graphs_ = std::make_unique<dev::DecodeGraphs>(ops(), weights_.config, *pool_, kAllExpertsMaxRows);
  });
  if (grouped()) {  // collective: every rank got here
    const ModelParallel& groups = group().model_parallel();
    if (groups.tensor) {
      std::string kind;
      tensor_ = platform_->device_group(*groups.tensor, kind);
      sdk::log(MLPT_LOG_INFO, component_,
               "engine group '" + group().name() + "' rank " + std::to_string(group_rank()) +
                   ": tensor-parallel sums over " + kind);
    }
    // The model exchanges routed rows over the host's expert group (host-staged dispatch).
    parallel_ = ModelParallel{tensor_.get(), groups.expert, groups.routed};
  }
}

DeviceEngineBackend::~DeviceEngineBackend() {
  tensor_.reset();  // may hold the platform's stream
  graphs_.reset();  // returns its pad block to the pool
  ws_.reset();
  pool_.reset();
}

std::unique_ptr<SequenceState> DeviceEngineBackend::new_shard_state() {
  return std::make_unique<State>(*this);
}

std::unique_ptr<SequenceState> DeviceEngineBackend::clone(const State& from) {
  std::lock_guard lk(mutex_);
  platform_->bind_thread();
  auto copy = std::make_unique<State>(*this);
  if (!from.existing()) return copy;
  const dev::DeviceSequenceState& src = *from.existing();
  dev::DeviceSequenceState& dst = copy->device();
  dst.copy_recurrent_from(ops(), src);
  // Keys and values: the blocks the source has filled are shared (never written again); the last,
  // partly filled one is copied, since both sequences go on writing into it.
  const size_t full = static_cast<size_t>(src.length / pool_->block_size());
  pool_->share(src.blocks, full, dst.blocks);
  pool_->reserve(dst.blocks, src.length);
  if (dst.blocks.size() > full)
    dev::copy_kv(ops(), weights_.config, pool_->cache(), {src.blocks[full]}, {dst.blocks[full]},
                 src.length - static_cast<int64_t>(full) * pool_->block_size());
  ops().synchronize();
  return copy;
}

std::function<void()> DeviceEngineBackend::prepare_weights(Weights<float> weights) {
  std::lock_guard lk(mutex_);
  platform_->bind_thread();
  auto next = std::make_shared<dev::DeviceWeights>(
      dev::upload_weights(ops(), weights));  // the current stay until the swap
  return [this, next] {
    std::lock_guard swap(mutex_);
    weights_ = std::move(*next);
  };
}

void DeviceEngineBackend::load_weights(const mlpt_named_tensor* tensors, size_t count,
                                       const mlpt_device_ready& ready) {
  std::lock_guard lk(mutex_);
  platform_->bind_thread();
  // The producer's writes may still be queued (mlpt.h, Device memory): the copies below wait for them.
  if (ready.kind == MLPT_READY_AFTER_EVENT && !ready.event)
    throw Error(MLPT_INVALID_ARGUMENT, "load_weights: ready after an event, but the event is NULL");
  platform_->wait_for(ready);
  // Checked against this rank's layout (a shard's expert tensors hold its block of experts).
  const std::vector<int> index = match_named_tensors(weights_.layout, tensors, count, true);
  dev::DeviceWeights next =
      dev::allocate_weights(ops(), weights_.config, weights_.layout);  // the current stay until all is copied
  Buffer staging;
  std::vector<float> host;
  for (size_t n = 0; n < count; ++n) {
    const DLTensor& t = tensors[n].tensor;
    const int i = index[n];
    const int64_t numel = weights_.layout.tensors[i].numel();
    float* dst = take<float>(ops(), staging, numel);
    if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
      if (!(t.dtype == sdk::kFloat32))
        throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + weights_.layout.tensors[i].name +
                                               "' is in device memory as " + sdk::dtype_name(t.dtype) +
                                               "; device tensors must be float32");
      if (!platform_->copy_device_tensor(t, size_t(numel) * 4, dst))
        throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + weights_.layout.tensors[i].name + "' is in memory " +
                                               component_ + " cannot read (device type " +
                                               std::to_string(t.device.device_type) + ")");
    } else {
      host.resize(size_t(numel));
      host_tensor_to_float(t, host.data());
      if (numel) ops().to_device(dst, host.data(), size_t(numel) * 4);
    }
    dev::assign_tensor(ops(), next, i, dst);
    ops().synchronize();  // staging and host are reused
  }
  weights_ = std::move(next);
}

void DeviceEngineBackend::run_step(const std::vector<StepSegment>& segments, int64_t valid,
                                   bool record_routing, StepOutput& out, const GroupForward& together) {
  std::lock_guard lk(mutex_);
  platform_->bind_thread();  // the scheduler thread is the engine's own
  const ModelConfig& c = weights_.config;
  dev::DeviceBatch batch;
  batch.kv = &pool_->cache();
  batch.chunked = false;
  dev::SampleRows rows;
  std::vector<size_t> host_rows;
  std::vector<const StepSegment*> sampled;  // per head row: its segment's sampling, NULL for none
  // Only rank 0 knows which segments sample, and with the vocabulary split every TP rank's range of
  // the LM head takes part in gathering the rows sampled: so every rank runs the head on the last
  // row of every segment with tokens, and rank 0 takes the draws of those that sample.
  const bool every_row = grouped() && vocab_range(c.vocab_size, c.shard).count() < c.vocab_size;
  for (size_t s = 0; s < segments.size(); ++s) {
    const StepSegment& g = segments[s];
    dev::DeviceSequenceState& st = static_cast<State*>(g.state)->device();
    // Before the forward: a pool that runs out fails the step on rank 0 before the group hears of
    // it (every rank's pool is as large and takes the same reservations, rank 0's first).
    pool_->reserve(st.blocks, st.length + static_cast<int64_t>(g.tokens.size()));
    batch.tokens.insert(batch.tokens.end(), g.tokens.begin(), g.tokens.end());
    batch.offsets.push_back(static_cast<int64_t>(batch.tokens.size()));
    batch.states.push_back(&st);
    batch.chunked |= chunked_prefill_ && g.tokens.size() > 1;
    if (!g.sample && !(every_row && !g.tokens.empty())) continue;
    rows.segment.push_back(s);
    sampled.push_back(g.sample ? &g : nullptr);
    if (!g.sample) {  // a head row for the gather only: its draw is not used
      rows.params.push_back(SamplingRow{1.f, 1.f, 0, 0});
      rows.host_logits.push_back(false);
      continue;
    }
    const SamplingParams& p = *g.sample;
    rows.params.push_back(SamplingRow{p.temperature, p.top_p, p.seed, g.counter});
    const bool top_k = p.top_k > 0 && p.top_k < valid;  // the device sampler has no top-k
    rows.host_logits.push_back(top_k);
  }
  const int64_t per = c.num_moe_layers() * c.experts_per_token;
  out.routing.assign(record_routing ? batch.tokens.size() * size_t(per) : 0, 0);
  if (record_routing) batch.routed_experts = out.routing.data();
  if (grouped()) batch.parallel = &parallel_;
  dev::StepResult r;
  if (graphs_ && graphs_->refusal(batch).empty()) {
    const int64_t failed = graphs_->stats().failed;
    together([&] { r = graphs_->step(weights_, batch, rows, valid); });
    if (graphs_->stats().failed != failed)
      sdk::log(MLPT_LOG_WARNING, component_,
               "cuda_graphs: a decode bucket could not be recorded and runs op by op: " +
                   graphs_->stats().failure);
  } else {
    together([&] { r = dev::generate_step(ops(), weights_, batch, rows, valid, *ws_, scratch_); });
  }
  out.sampled.clear();
  for (size_t j = 0, h = 0; j < sampled.size(); ++j) {
    if (!sampled[j]) continue;
    if (rows.host_logits[j]) {
      const float* logits = r.logits.data() + (h++) * size_t(c.vocab_size);
      out.sampled.push_back(sample_token(logits, valid, *sampled[j]->sample, sampled[j]->counter));
    } else {
      if (r.tokens[j] < 0)
        throw Error(MLPT_INTERNAL, "sampling found no token for position " +
                                       std::to_string(sampled[j]->counter) + " (its logits are not finite)");
      out.sampled.push_back(SampledToken{r.tokens[j], r.logprobs[j]});
    }
  }
}

}  // namespace mlpt::ref
