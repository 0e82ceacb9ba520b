#include "core/run/weight_refit.hpp"

#include <cstdio>
#include <future>

#include "core/error.hpp"
#include "core/refit/weight_flow.hpp"

namespace mlpt::run {

WeightRefit::WeightRefit(const RunSettings& settings, components::Trainer& trainer, components::Engine& engine,
                         components::Transport& sender, components::Transport& receiver, Observer observer)
    : trainer_(trainer), engine_(engine), sender_(sender), receiver_(receiver), observer_(std::move(observer)) {
  if (settings.refit == "sparse" && engine_.weight_shards().count > 0) {
    std::fprintf(stderr, "[mlpt] refit = \"sparse\" relays whole tensors; engine %s holds shards: refitting dense\n",
                 engine_.component().name.c_str());
    return;
  }
  encoder_ = sparse_refit_encoder(settings, trainer_);
  if (encoder_) decoder_ = std::make_unique<refit::RefitReceiver>();
}

std::unique_ptr<refit::RefitSender> sparse_refit_encoder(const RunSettings& settings,
                                                         const components::Trainer& trainer) {
  if (settings.refit != "sparse") return nullptr;
  // Sparse refits compare bytes on the CPU: weights in device memory are refitted dense.
  const DLDeviceType weights_on = trainer.capabilities().device_type;
  if (weights_on == kDLCPU || weights_on == kDLCUDAHost)
    return std::make_unique<refit::RefitSender>(settings.full_refit_every_steps);
  std::fprintf(stderr, "[mlpt] refit = \"sparse\" needs the trainer's weights in host memory (they are on device type %d): refitting dense\n",
               static_cast<int>(weights_on));
  return nullptr;
}

void WeightRefit::prepare(uint64_t version) {
  version_ = version;
  if (!encoder_) return;
  weights_ = trainer_.export_weights();
  for (size_t i = 0; weights_.shards && i < weights_.count; ++i)
    if (weights_.shards[i].offsets || weights_.shards[i].global_shape)
      throw Error(MLPT_FAILED_PRECONDITION, "the trainer exported shards; a sparse refit needs whole tensors (set [run] refit = \"dense\")");
  const auto& m = encoder_->prepare(version, weights_.tensors, weights_.count);
  message_ = m.data(), message_count_ = m.size(), stats_ = encoder_->stats();
}

refit::RefitStats WeightRefit::deliver() {
  if (!encoder_) return deliver_dense();
  // Receive on another thread: a transport may need both ends active at once.
  auto received = std::async(std::launch::async, [&] { return receiver_.receive(version_, refit::kTransferTimeoutMs); });
  sender_.send(version_, message_, message_count_, refit::kTransferTimeoutMs);
  auto got = received.get();
  try {
    const auto& rebuilt = decoder_->apply(got.version, got.tensors, got.count);
    load(got.version, rebuilt.data(), rebuilt.size());
  } catch (...) {
    receiver_.release(got.version);
    throw;
  }
  receiver_.release(got.version);
  return stats_;
}

// Plugin to plugin: the engine fetches on another thread while the trainer publishes.
refit::RefitStats WeightRefit::deliver_dense() {
  auto fetched = std::async(std::launch::async, [&] { return refit::fetch(engine_, receiver_, version_, refit::kTransferTimeoutMs); });
  const refit::PublishResult published = refit::publish(trainer_, sender_, refit::kTransferTimeoutMs);
  const uint64_t loaded = fetched.get();
  if (published.version != version_ || loaded != version_)
    throw Error(MLPT_INTERNAL, "refit of version " + std::to_string(version_) + ": the trainer published version " +
                                   std::to_string(published.version) + " and the engine loaded " + std::to_string(loaded));
  if (observer_) {
    const auto w = trainer_.export_weights();  // the test hook sees what was published
    observer_(version_, w.tensors, w.count, nullptr, 0);
  }
  refit::RefitStats stats{"dense"};
  stats.bytes = stats.dense_bytes = published.bytes;
  return stats;
}

void WeightRefit::load(uint64_t version, const mlpt_named_tensor* tensors, size_t count) {
  engine_.load_weights(version, tensors, count);
  if (observer_) observer_(version, weights_.tensors, weights_.count, tensors, count);
}

}  // namespace mlpt::run
