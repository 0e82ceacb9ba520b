#include "core/run/local_placement.hpp"

#include <unistd.h>

#include <string>

#include "core/run/rollout_threads.hpp"
#include "core/run/trainer_settings.hpp"

namespace mlpt::run {

LocalPlacement::LocalPlacement(const RunConfig& c, plugin::HostServices& host,
                               const std::atomic<bool>* cancelled, WeightRefit::Observer after_refit) {
  set_ = std::make_unique<plugin::ComponentSet>(c.components, host);
  // A settings error names the setting's file, line and key in the config.
  trainer_ = set_->create(MLPT_COMPONENT_TRAINER, [&] {
    return std::make_unique<components::Trainer>(set_->component(MLPT_COMPONENT_TRAINER),
                                                 trainer_settings(c, set_->settings(MLPT_COMPONENT_TRAINER)));
  });
  const std::string group = "mlpt-run-" + std::to_string(::getpid());
  rollouts_ = std::make_unique<RolloutComponents>(c, *set_, group, cancelled);
  sender_ = set_->make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_SENDER, group);
  refit_ = std::make_unique<WeightRefit>(c.run, *set_, *trainer_, rollouts_->engine(), *sender_, group,
                                         rollouts_->weights(), std::move(after_refit));
  pool_ = make_rollout_pool(c.run, rollouts_->environment());
}

LocalPlacement::~LocalPlacement() {
  pool_.reset();
}

void LocalPlacement::cancel(const std::vector<uint64_t>& ids) {
  for (auto id : ids) {
    try {
      rollouts_->engine().cancel(id);
    } catch (const Error&) {  // it finished meanwhile
    }
  }
  try {
    rollouts_->engine().resume();  // requests held by a paused engine must see the cancellation
  } catch (const Error&) {         // it was not paused
  }
}

refit::RefitStats LocalPlacement::deliver_weights(uint64_t version) {
  rollouts_->engine().pause();
  const refit::RefitStats stats = refit_->deliver(version);
  rollouts_->engine().resume();
  return stats;
}

uint64_t LocalPlacement::load_state(const std::string& dir) {
  trainer_->load_state(dir);
  return trainer_->export_weights().version;
}

}  // namespace mlpt::run
