#include "core/refit/weight_flow.hpp"

#include "core/refit/host_tensor.hpp"
#include "mlpt/sdk/weight_delivery.hpp"

namespace mlpt::refit {

PublishResult publish(components::Trainer& trainer, components::Transport& sender, int64_t timeout_ms) {
  if (trainer.publishes() && sender.bindable()) {
    const auto p = trainer.publish_weights(sender, timeout_ms);
    return PublishResult{p.version, p.bytes, true};
  }
  const auto w = trainer.export_weights();
  sender.send(w.version, w.tensors, w.count, timeout_ms, w.shards, &w.ready);
  PublishResult r{w.version, 0, false};
  for (size_t i = 0; i < w.count; ++i) r.bytes += byte_size(w.tensors[i].tensor);
  return r;
}

uint64_t fetch(components::Engine& engine, components::Transport& receiver, uint64_t min_version, int64_t timeout_ms) {
  if (engine.fetches() && receiver.bindable()) return engine.fetch_weights(receiver, min_version, timeout_ms);
  const auto got = receiver.receive(min_version, timeout_ms, engine.weight_shards());
  sdk::load_then_release(
      got.version, [&] { engine.load_weights(got.version, got.tensors, got.count, got.shards, &got.ready); },
      [&](uint64_t version) { receiver.release(version); });
  return got.version;
}

}  // namespace mlpt::refit
