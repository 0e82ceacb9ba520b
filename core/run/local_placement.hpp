// Every component in this process: the trainer, the transport's two endpoints, and one rollout
// worker's engine, sandboxes, harness and reward, with the episodes on a RolloutPool of the run's
// threads. Weights go from trainer to engine as WeightRefit composes them ([run] refit).
#pragma once

#include <atomic>
#include <memory>

#include "core/plugin/component_set.hpp"
#include "core/plugin/host_services.hpp"
#include "core/rollout/rollout_pool.hpp"
#include "core/run/component_placement.hpp"
#include "core/run/rollout_components.hpp"
#include "core/run/run_config.hpp"
#include "core/run/weight_refit.hpp"

namespace mlpt::run {

class LocalPlacement final : public ComponentPlacement {
 public:
  // Loads the components of `config` with `host`'s services; episodes stop promptly once
  // `cancelled` is set. `after_refit` sees each refit (RunOptions::after_refit).
  LocalPlacement(const RunConfig& config, plugin::HostServices& host, const std::atomic<bool>* cancelled,
                 WeightRefit::Observer after_refit);
  ~LocalPlacement() override;  // waits for the episodes in flight

  void start(rollout::EpisodeRequest request, rollout::EpisodeDone done) override {
    pool_->start(std::move(request), std::move(done));
  }
  void wait_idle() override { pool_->wait_idle(); }
  int64_t in_flight() const override { return pool_->in_flight(); }
  void cancel(const std::vector<uint64_t>& ids) override;

  std::vector<components::Metric> train_step(const mlpt_train_batch& batch, uint64_t* new_version) override {
    return trainer_->train_step(batch, new_version);
  }
  void prepare_weights(uint64_t) override { refit_->prepare(); }
  refit::RefitStats deliver_weights(uint64_t version) override;

  bool can_save_state() const override { return trainer_->can_save_state(); }
  void save_state(const std::string& dir) override { trainer_->save_state(dir); }
  uint64_t load_state(const std::string& dir) override;

  bool record_routed_experts() const override { return rollouts_->environment().record_routed_experts; }
  mlpt_engine_model_info model_info() const override { return rollouts_->engine().model_info(); }
  int32_t end_of_turn_token() const override { return rollouts_->environment().stop_tokens.front(); }

 private:
  std::unique_ptr<plugin::ComponentSet> set_;
  std::unique_ptr<components::Trainer> trainer_;
  std::unique_ptr<RolloutComponents> rollouts_;
  std::unique_ptr<components::Transport> sender_;
  std::unique_ptr<WeightRefit> refit_;
  std::unique_ptr<rollout::RolloutPool> pool_;  // last: its episodes use everything above
};

}  // namespace mlpt::run
