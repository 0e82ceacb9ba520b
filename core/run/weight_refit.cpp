#include "core/run/weight_refit.hpp"

#include <cstdio>
#include <future>

#include "core/error.hpp"
#include "core/refit/host_tensor.hpp"
#include "core/refit/reshard_plan.hpp"

namespace mlpt::run {

WeightRefit::WeightRefit(const RunSettings& settings, components::Trainer& trainer, components::Engine& engine,
                         components::Transport& sender, components::Transport& receiver, Observer observer)
    : trainer_(trainer), engine_(engine), sender_(sender), receiver_(receiver), observer_(std::move(observer)) {
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
  weights_ = trainer_.export_weights();
  if (encoder_) {
    const auto& m = encoder_->prepare(version, weights_.tensors, weights_.count);
    message_ = m.data(), message_count_ = m.size(), stats_ = encoder_->stats();
    return;
  }
  message_ = weights_.tensors, message_count_ = weights_.count;
  stats_ = refit::dense_stats(weights_.tensors, weights_.count);
}

refit::RefitStats WeightRefit::deliver() {
  // Receive on another thread: a transport may need both ends active at once.
  auto received = std::async(std::launch::async, [&] { return receiver_.receive(version_, 600000); });
  sender_.send(version_, message_, message_count_, 600000);
  auto got = received.get();
  try {
    if (decoder_) {
      const auto& rebuilt = decoder_->apply(got.version, got.tensors, got.count);
      load(got.version, rebuilt.data(), rebuilt.size());
    } else {
      load(got.version, got.tensors, got.count);
    }
  } catch (...) {
    receiver_.release(got.version);
    throw;
  }
  receiver_.release(got.version);
  return stats_;
}

void WeightRefit::load(uint64_t version, const mlpt_named_tensor* tensors, size_t count) {
  // The run has one trainer rank: what it exports must be whole (its shards cover every tensor).
  for (size_t i = 0; weights_.shards && i < count; ++i)
    if (!refit::is_whole(tensors[i].tensor, &weights_.shards[i]))
      throw Error(MLPT_FAILED_PRECONDITION, "the trainer exported only a shard of '" +
                                                std::string(tensors[i].name.data, tensors[i].name.size) +
                                                "'; a run with one trainer rank needs whole tensors");
  engine_.load_weights(version, tensors, count);
  if (observer_) observer_(version, weights_.tensors, weights_.count, tensors, count);
}

}  // namespace mlpt::run
