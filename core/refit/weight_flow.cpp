#include "core/refit/weight_flow.hpp"

namespace mlpt::refit {

PublishResult publish(components::Trainer& trainer, components::Transport& sender, int64_t timeout_ms) {
  if (trainer.publishes() && sender.bindable()) {
    const auto p = trainer.publish_weights(sender, timeout_ms);
    return PublishResult{p.version, p.bytes, true};
  }
  const auto w = trainer.export_weights();
  sender.send(w.version, w.tensors, w.count, timeout_ms, w.shards, &w.ready);
  PublishResult r{w.version, 0, false};
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    uint64_t n = (t.dtype.bits * t.dtype.lanes + 7u) / 8u;
    for (int d = 0; d < t.ndim; ++d) n *= static_cast<uint64_t>(t.shape[d]);
    r.bytes += n;
  }
  return r;
}

uint64_t fetch(components::Engine& engine, components::Transport& receiver, uint64_t min_version, int64_t timeout_ms) {
  if (engine.fetches() && receiver.bindable()) return engine.fetch_weights(receiver, min_version, timeout_ms);
  const auto got = receiver.receive(min_version, timeout_ms, engine.weight_shards());
  try {
    engine.load_weights(got.version, got.tensors, got.count, got.shards, &got.ready);
  } catch (...) {
    try {
      receiver.release(got.version);
    } catch (const Error&) {  // the load's error says more
    }
    throw;
  }
  receiver.release(got.version);
  return got.version;
}

}  // namespace mlpt::refit
