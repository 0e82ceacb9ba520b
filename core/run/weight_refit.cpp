#include "core/run/weight_refit.hpp"

#include <future>

#include "core/error.hpp"
#include "core/refit/sparse_refit_transport.hpp"

namespace mlpt::run {

std::string sparse_refit_refused(const RunSettings& settings, const components::Trainer& trainer) {
  if (settings.refit != "sparse") return {};
  // Sparse refits compare bytes on the CPU: weights in device memory are refitted dense.
  const DLDeviceType weights_on = trainer.capabilities().device_type;
  if (weights_on == kDLCPU || weights_on == kDLCUDAHost) return {};
  return "refit = \"sparse\" needs the trainer's weights in host memory (they are on device type " +
         std::to_string(static_cast<int>(weights_on)) + "): refitting dense";
}

std::unique_ptr<refit::WeightSender> weight_sender(const RunSettings& settings,
                                                   components::Transport& endpoint,
                                                   const std::string& refused) {
  if (settings.refit != "sparse" || !refused.empty())
    return std::make_unique<refit::DirectSender>(endpoint, refused);
  return std::make_unique<refit::SparseRefitSender>(endpoint, settings.full_refit_every_steps);
}

std::unique_ptr<refit::WeightReceiver> weight_receiver(bool sparse, components::Transport& endpoint) {
  if (sparse) return std::make_unique<refit::SparseRefitReceiver>(endpoint);
  return std::make_unique<refit::DirectReceiver>(endpoint);
}

WeightRefit::WeightRefit(const RunSettings& settings, components::Trainer& trainer,
                         components::Engine& engine, components::Transport& sender,
                         components::Transport& receiver, Observer observer)
    : trainer_(trainer), engine_(engine), observer_(std::move(observer)) {
  std::string refused = sparse_refit_refused(settings, trainer_);
  if (settings.refit == "sparse" && refused.empty() && engine_.weight_shards().count > 0)
    refused = "refit = \"sparse\" relays whole tensors; engine " + engine_.component().name +
              " holds shards: refitting dense";
  sender_ = weight_sender(settings, sender, refused);
  receiver_ = weight_receiver(settings.refit == "sparse" && refused.empty(), receiver);
}

refit::RefitStats WeightRefit::deliver(uint64_t version) {
  // The engine fetches on another thread while the trainer sends: a transport may need both ends.
  auto fetched = std::async(std::launch::async,
                            [&] { return receiver_->fetch(engine_, version, refit::kTransferTimeoutMs); });
  const refit::SentVersion sent = sender_->send(trainer_, refit::kTransferTimeoutMs);
  const uint64_t loaded = fetched.get();
  if (sent.version != version || loaded != version)
    throw Error(MLPT_INTERNAL, "refit of version " + std::to_string(version) + ": the trainer sent version " +
                                   std::to_string(sent.version) + " and the engine loaded " +
                                   std::to_string(loaded));
  if (observer_) {
    const auto exported = trainer_.export_weights();  // the test hook sees what was sent
    const auto whole = receiver_->loaded();
    observer_(version, exported.tensors, exported.count, whole.empty() ? nullptr : whole.data(),
              whole.size());
  }
  return sent.stats;
}

}  // namespace mlpt::run
