#include "core/refit/sparse_refit_transport.hpp"

#include "core/error.hpp"

namespace mlpt::refit {

std::unique_ptr<components::Transport> wrap_sparse(const plugin::ComponentSet& set,
                                                   components::Transport& inner, mlpt_transport_role role,
                                                   const std::string& group, const nlohmann::json& settings,
                                                   sdk::WrappedTransportExtension& extension) {
  if (!inner.bindable())
    throw Error(MLPT_FAILED_PRECONDITION,
                "[run] refit = \"sparse\" wraps the run's transport, and " + inner.component().name +
                    " speaks an ABI older than 1.2 (its endpoints cannot be bound); set refit = \"dense\"");
  extension.header = mlpt_extension{sizeof(extension), sdk::kWrappedTransportExtension, nullptr};
  extension.inner = *inner.binding();
  const plugin::Component sparse =
      set.extra(MLPT_COMPONENT_TRANSPORT, kSparseTransportPlugin, kSparseTransportName);
  return std::make_unique<components::Transport>(sparse, settings, role, group, nullptr, &extension.header);
}

SparseRefitSender::SparseRefitSender(const plugin::ComponentSet& set, components::Transport& inner,
                                     const std::string& group, int64_t full_every, bool check_change_lists) {
  extension_.report_ctx = this;
  extension_.report = &on_report;
  endpoint_ = wrap_sparse(set, inner, MLPT_TRANSPORT_SENDER, group, {{"full_every", full_every}, {"check_change_lists", check_change_lists}}, extension_);
}

void SparseRefitSender::on_report(void* ctx, const sdk::WrappedTransportReport* report) {
  auto* self = static_cast<SparseRefitSender*>(ctx);
  std::lock_guard lock(self->mutex_);
  self->report_ = *report;
}

SentVersion SparseRefitSender::send(components::Trainer& trainer, int64_t timeout_ms) {
  {
    std::lock_guard lock(mutex_);
    report_.reset();
  }
  const PublishResult published = publish(trainer, *endpoint_, timeout_ms);
  std::lock_guard lock(mutex_);
  if (!report_ || report_->version != published.version)
    throw Error(MLPT_INTERNAL, "the sparse transport sent version " + std::to_string(published.version) +
                                   " without reporting what it cost");
  SentVersion sent{published.version, RefitStats{report_->full ? "full" : "delta"}};
  sent.stats.bytes = report_->bytes;
  sent.stats.dense_bytes = report_->dense_bytes;
  sent.stats.numel = report_->elements;
  sent.stats.changed = report_->changed;
  sent.stats.whole_by_rates = report_->whole_by_rates != 0;
  sent.stats.from_change_list = report_->from_change_list != 0;
  return sent;
}

SparseRefitReceiver::SparseRefitReceiver(const plugin::ComponentSet& set, components::Transport& inner,
                                         const std::string& group)
    : endpoint_(
          wrap_sparse(set, inner, MLPT_TRANSPORT_RECEIVER, group, nlohmann::json::object(), extension_)) {}

}  // namespace mlpt::refit
