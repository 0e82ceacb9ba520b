// The sparse refit's two ends as the host composes them: an endpoint of the sparse transport plugin
// (plugins/transport_sparse) wrapping the run's own endpoint (mlpt/sdk/wrapped_transport.hpp). The
// plugin encodes what changed on the trainer's side and rebuilds each version on the engine's, so
// the copies of the weights it compares against and rebuilds into are the plugin's: the host only
// binds the endpoints, and the weights go plugin to plugin as on a dense refit (weight_flow.hpp).
// The sender end reads what each version cost from the plugin's report.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/plugin/component_set.hpp"
#include "core/refit/weight_route.hpp"
#include "mlpt/sdk/wrapped_transport.hpp"

namespace mlpt::refit {

// The plugin file and component the host wraps the run's transport with.
inline constexpr const char* kSparseTransportPlugin = "libmlpt_transport_sparse.so";
inline constexpr const char* kSparseTransportName = "sparse";

// An endpoint of the sparse transport over `inner`, created from `set`'s plugin folders. `extension`
// is filled with `inner`'s binding and passed to the plugin, which keeps it: both must outlive the
// endpoint; a sender's reports go to the sink the caller set in it.
std::unique_ptr<components::Transport> wrap_sparse(const plugin::ComponentSet& set,
                                                   components::Transport& inner, mlpt_transport_role role,
                                                   const std::string& group, const nlohmann::json& settings,
                                                   sdk::WrappedTransportExtension& extension);

class SparseRefitSender final : public WeightSender {
 public:
  // `full_every`: a full version every that many (0: only the first and when the layout changes).
  // `check_change_lists`: the plugin's setting of that name (its README).
  SparseRefitSender(const plugin::ComponentSet& set, components::Transport& inner, const std::string& group,
                    int64_t full_every, bool check_change_lists = false);
  SentVersion send(components::Trainer& trainer, int64_t timeout_ms) override;

 private:
  static void on_report(void* ctx, const sdk::WrappedTransportReport* report);
  std::mutex mutex_;
  std::optional<sdk::WrappedTransportReport> report_;  // the last version's, from the plugin
  sdk::WrappedTransportExtension extension_{};
  std::unique_ptr<components::Transport> endpoint_;
};

class SparseRefitReceiver final : public WeightReceiver {
 public:
  SparseRefitReceiver(const plugin::ComponentSet& set, components::Transport& inner,
                      const std::string& group);
  uint64_t fetch(components::Engine& engine, uint64_t min_version, int64_t timeout_ms) override {
    return refit::fetch(engine, *endpoint_, min_version, timeout_ms);
  }

 private:
  sdk::WrappedTransportExtension extension_{};
  std::unique_ptr<components::Transport> endpoint_;
};

}  // namespace mlpt::refit
