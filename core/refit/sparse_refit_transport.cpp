#include "core/refit/sparse_refit_transport.hpp"

#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/refit/refit_manifest.hpp"
#include "mlpt/sdk/weight_delivery.hpp"

namespace mlpt::refit {

void SparseRefitSender::prepare(components::Trainer& trainer) {
  const auto w = trainer.export_weights();
  if (prepared_ == w.version) return;  // encoded already
  for (size_t i = 0; w.shards && i < w.count; ++i)
    if (w.shards[i].offsets || w.shards[i].global_shape)
      throw Error(
          MLPT_FAILED_PRECONDITION,
          "the trainer exported shards; a sparse refit needs whole tensors (set [run] refit = \"dense\")");
  encoder_.prepare(w.version, w.tensors, w.count);
  prepared_ = w.version;
}

SentVersion SparseRefitSender::send(components::Trainer& trainer, int64_t timeout_ms) {
  if (!prepared_) prepare(trainer);
  const uint64_t version = *prepared_;
  prepared_.reset();
  const auto& message = encoder_.message();
  endpoint_.send(version, message.data(), message.size(), timeout_ms);
  return SentVersion{version, encoder_.stats()};
}

uint64_t SparseRefitReceiver::fetch(components::Engine& engine, uint64_t min_version, int64_t timeout_ms) {
  const auto got = endpoint_.receive(min_version, timeout_ms);
  loaded_ = {};
  sdk::load_then_release(
      got.version,
      [&] {
        // A sparse refit's message starts with its manifest; anything else is the weights themselves.
        if (got.count > 0 &&
            std::string_view(got.tensors[0].name.data, got.tensors[0].name.size) == kManifestName) {
          const auto& rebuilt = decoder_.apply(got.version, got.tensors, got.count);
          engine.load_weights(got.version, rebuilt.data(), rebuilt.size());
          loaded_ = rebuilt;
        } else {
          engine.load_weights(got.version, got.tensors, got.count);
        }
      },
      [&](uint64_t version) { endpoint_.release(version); });
  return got.version;
}

}  // namespace mlpt::refit
