// The sparse refit as a transport that wraps the run's own: the sender end exports the trainer's
// weights, encodes what changed since the last version (refit_sender.hpp) and sends that message
// through the wrapped endpoint; the receiver end rebuilds each version from it (refit_receiver.hpp),
// checks it against the sender's checksums and loads it. Each end keeps the copy of the weights it
// compares against or rebuilds into: the wrapper's, so whatever composes it holds none. A message
// without the refit manifest (a sender that went dense) is loaded as it came.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/refit/refit_receiver.hpp"
#include "core/refit/refit_sender.hpp"
#include "core/refit/weight_route.hpp"

namespace mlpt::refit {

class SparseRefitSender final : public WeightSender {
 public:
  // `full_every`: a full version every that many (0: only the first and when the layout changes).
  SparseRefitSender(components::Transport& endpoint, int64_t full_every)
      : endpoint_(endpoint), encoder_(full_every) {}
  // Exports and encodes (once per version), so generation goes on while the versions are compared.
  void prepare(components::Trainer& trainer) override;
  SentVersion send(components::Trainer& trainer, int64_t timeout_ms) override;

 private:
  components::Transport& endpoint_;
  RefitSender encoder_;
  std::optional<uint64_t> prepared_;  // the version whose message encoder_ holds, until sent
};

class SparseRefitReceiver final : public WeightReceiver {
 public:
  explicit SparseRefitReceiver(components::Transport& endpoint) : endpoint_(endpoint) {}
  uint64_t fetch(components::Engine& engine, uint64_t min_version, int64_t timeout_ms) override;
  std::span<const mlpt_named_tensor> loaded() const override { return loaded_; }

 private:
  components::Transport& endpoint_;
  RefitReceiver decoder_;
  std::span<const mlpt_named_tensor> loaded_;
};

}  // namespace mlpt::refit
