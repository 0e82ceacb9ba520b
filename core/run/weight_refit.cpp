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
                                                   const plugin::ComponentSet& set,
                                                   components::Transport& endpoint, const std::string& group,
                                                   const std::string& refused) {
  if (settings.refit != "sparse" || !refused.empty())
    return std::make_unique<refit::DirectSender>(endpoint, refused);
  return std::make_unique<refit::SparseRefitSender>(set, endpoint, group, settings.full_refit_every_steps,
                                                    settings.check_change_lists);
}

std::unique_ptr<refit::WeightReceiver> weight_receiver(const RunSettings& settings,
                                                       const plugin::ComponentSet& set,
                                                       components::Transport& endpoint,
                                                       const std::string& group) {
  if (settings.refit == "sparse") return std::make_unique<refit::SparseRefitReceiver>(set, endpoint, group);
  return std::make_unique<refit::DirectReceiver>(endpoint);
}

WeightRefit::WeightRefit(const RunSettings& settings, const plugin::ComponentSet& set,
                         components::Trainer& trainer, components::Engine& engine,
                         components::Transport& sender, const std::string& group,
                         refit::WeightReceiver& receiver, Observer observer)
    : trainer_(trainer),
      engine_(engine),
      receiver_(receiver),
      observer_(std::move(observer)),
      sender_(weight_sender(settings, set, sender, group, sparse_refit_refused(settings, trainer))) {}

refit::RefitStats WeightRefit::deliver(uint64_t version) {
  // The engine fetches on another thread while the trainer sends: a transport may need both ends.
  auto fetched = std::async(std::launch::async,
                            [&] { return receiver_.fetch(engine_, version, refit::kTransferTimeoutMs); });
  const refit::SentVersion sent = sender_->send(trainer_, refit::kTransferTimeoutMs);
  const uint64_t loaded = fetched.get();
  if (sent.version != version || loaded != version)
    throw Error(MLPT_INTERNAL, "refit of version " + std::to_string(version) + ": the trainer sent version " +
                                   std::to_string(sent.version) + " and the engine loaded " +
                                   std::to_string(loaded));
  if (observer_) {
    const auto exported = trainer_.export_weights();  // the test hook sees what was sent
    observer_(version, exported.tensors, exported.count);
  }
  return sent.stats;
}

}  // namespace mlpt::run
