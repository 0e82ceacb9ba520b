// The sparse refit as a transport that wraps the run's own (mlpt/sdk/wrapped_transport.hpp). The
// sender end encodes each version as what changed since the last one (refit_sender.hpp) and sends
// that message through the inner endpoint; the receiver end rebuilds the version from it
// (refit_receiver.hpp), checks it against the sender's checksums and hands it out until release.
// The copies each end compares against or rebuilds into are this plugin's: the host holds none.
#include <chrono>
#include <mlpt/sdk.hpp>
#include <mlpt/sdk/changed_elements.hpp>
#include <mlpt/sdk/settings.hpp>
#include <mlpt/sdk/wrapped_transport.hpp>
#include <optional>
#include <string_view>

#include "refit_manifest.hpp"
#include "refit_receiver.hpp"
#include "refit_sender.hpp"

namespace {

using mlpt::sdk::Error;
using Clock = std::chrono::steady_clock;

struct Config {
  int64_t full_every = 0;  // a full version every that many (0: the first, and when the layout changes)
  bool check_change_lists = false;  // compare anyway, and fail a trainer whose list misses a change
};

Config parse_config(std::string_view text) {
  mlpt::sdk::Settings s(text, "transport sparse");
  Config c;
  c.full_every = s.integer_or("full_every", 0, 0);
  c.check_change_lists = s.boolean_or("check_change_lists", false);
  s.reject_unknown();
  return c;
}

const mlpt::sdk::WrappedTransportExtension& wrapping(const mlpt_transport_create_args& a) {
  const bool has_chain =
      mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_create_args, extension_start));
  const auto* wrap = mlpt::sdk::find_wrapped_transport(has_chain ? a.extension_start : nullptr);
  if (!wrap)
    throw Error(MLPT_FAILED_PRECONDITION,
                "sparse: this transport wraps another, and the host passed none "
                "(mlpt/sdk/wrapped_transport.hpp); a run "
                "uses it through [run] refit = \"sparse\" over its [components.transport]");
  return *wrap;
}

class SparseTransport final : public mlpt::sdk::Transport {
 public:
  explicit SparseTransport(const mlpt_transport_create_args& a) : SparseTransport(a, wrapping(a)) {}

  void send(const mlpt_transport_send_args& a) override {
    if (role_ != MLPT_TRANSPORT_SENDER)
      throw Error(MLPT_FAILED_PRECONDITION, "sparse: send on a receiver endpoint");
    // Refused before encoding: the copy compared against must stay the last version sent.
    if (a.version <= last_sent_)
      throw Error(MLPT_INVALID_ARGUMENT, "sparse: version " + std::to_string(a.version) +
                                             " is not greater than the previous send's " +
                                             std::to_string(last_sent_) +
                                             " (versions must strictly increase)");
    if (mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_send_args, ready)) && a.ready &&
        a.ready->kind != MLPT_READY_ON_RETURN)
      throw Error(
          MLPT_UNIMPLEMENTED,
          "sparse: the weights are ready only after a device event; the sparse refit reads host memory");
    const bool has_chain =
        mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_send_args, extension_start));
    const auto* changes = mlpt::sdk::find_changed_elements(has_chain ? a.extension_start : nullptr);
    const auto& message = encoder_.prepare(a.version, a.tensors, a.num_tensors, resend_full_, changes);
    mlpt_transport_send_args out{};
    out.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
    out.transport = inner_.endpoint();
    out.version = a.version;
    out.tensors = message.data();
    out.num_tensors = message.size();
    out.timeout_ms = a.timeout_ms;
    const auto started = Clock::now();
    try {
      inner_.send(out);
    } catch (...) {
      resend_full_ = true;  // the receiver may not hold this version: the next delta would have no base
      throw;
    }
    const auto& s = encoder_.stats();
    encoder_.observe_send(s.bytes, std::chrono::duration<double>(Clock::now() - started).count());
    resend_full_ = false;
    last_sent_ = a.version;
    if (report_) {
      const mlpt::sdk::WrappedTransportReport r{a.version, s.full ? 1 : 0,  s.whole_by_rates ? 1 : 0,
                                                s.bytes,   s.dense_bytes,   s.numel,
                                                s.changed, s.marked ? 1 : 0};
      report_(report_ctx_, &r);
    }
  }

  void receive(mlpt_transport_receive_args& a) override {
    if (role_ != MLPT_TRANSPORT_RECEIVER)
      throw Error(MLPT_FAILED_PRECONDITION, "sparse: receive on a sender endpoint");
    if (held_)
      throw Error(MLPT_FAILED_PRECONDITION, "sparse: the receiver still holds version " +
                                                std::to_string(*held_) +
                                                "; release it before receiving again");
    mlpt_transport_receive_args in{};
    in.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
    in.transport = inner_.endpoint();
    in.min_version = a.min_version;
    in.timeout_ms = a.timeout_ms;
    inner_.receive(in);
    const bool refit_message = in.out_num_tensors > 0 &&
                               mlpt::sdk::view(in.out_tensors[0].name) == mlpt::sparse_refit::kManifestName;
    if (!refit_message) {
      // A sender that is not sparse (the host refitting dense): handed out as it came, held until release.
      held_ = in.out_version;
      holds_inner_ = true;
      a.out_version = in.out_version;
      a.out_tensors = in.out_tensors;
      a.out_num_tensors = in.out_num_tensors;
      if (mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)))
        a.out_shards = in.out_shards;
      if (mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_ready)))
        a.out_ready = in.out_ready;
      return;
    }
    const std::vector<mlpt_named_tensor>* rebuilt = nullptr;
    try {
      if (in.out_ready.kind != MLPT_READY_ON_RETURN)
        throw Error(MLPT_UNIMPLEMENTED,
                    "sparse: the inner transport delivered data ready only after a device event");
      rebuilt = &decoder_.apply(in.out_version, in.out_tensors, in.out_num_tensors);
    } catch (...) {
      inner_.release(in.out_version);
      throw;
    }
    inner_.release(in.out_version);  // rebuilt into this end's copy: the message is no longer needed
    held_ = in.out_version;
    holds_inner_ = false;
    a.out_version = in.out_version;
    a.out_tensors = rebuilt->data();
    a.out_num_tensors = rebuilt->size();
  }

  void release(uint64_t version) override {
    if (role_ != MLPT_TRANSPORT_RECEIVER)
      throw Error(MLPT_FAILED_PRECONDITION, "sparse: release on a sender endpoint");
    if (!held_)
      throw Error(MLPT_FAILED_PRECONDITION, "sparse: release of version " + std::to_string(version) +
                                                " but the receiver holds nothing");
    if (*held_ != version)
      throw Error(MLPT_INVALID_ARGUMENT, "sparse: release of version " + std::to_string(version) +
                                             " but the receiver holds version " + std::to_string(*held_));
    if (holds_inner_) inner_.release(version);
    held_.reset();
  }

 private:
  SparseTransport(const mlpt_transport_create_args& a, const mlpt::sdk::WrappedTransportExtension& wrap)
      : config_(parse_config(mlpt::sdk::view(a.config_json))),
        role_(a.role),
        inner_(&wrap.inner, "inner transport"),
        report_ctx_(wrap.report_ctx),
        report_(wrap.report),
        encoder_(config_.full_every, config_.check_change_lists) {
    const bool has_group =
        mlpt::sdk::has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_create_args, component_group));
    const mlpt_component_group* group = has_group ? a.component_group : nullptr;
    if (role_ == MLPT_TRANSPORT_SENDER && group && group->size > 1)
      throw Error(MLPT_UNIMPLEMENTED,
                  "sparse: a sender group of " + std::to_string(group->size) +
                      " ranks; the sparse refit compares whole tensors from one sender rank");
  }

  Config config_;
  mlpt_transport_role role_;
  mlpt::sdk::BoundTransport inner_;  // the host's, for this endpoint's whole life
  void* report_ctx_ = nullptr;
  void (*report_)(void*, const mlpt::sdk::WrappedTransportReport*) = nullptr;
  // Sender.
  mlpt::sparse_refit::RefitSender encoder_;
  uint64_t last_sent_ = 0;
  bool resend_full_ = false;
  // Receiver.
  mlpt::sparse_refit::RefitReceiver decoder_;
  std::optional<uint64_t> held_;
  bool holds_inner_ = false;  // the version held is the inner endpoint's (passed through)
};

// The reach is the inner transport's; this end reads and writes host memory only.
const mlpt_transport_capabilities kCapabilities = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE,
                                                   /*zero_copy=*/0,
                                                   /*cross_process=*/1,
                                                   /*cross_node=*/1,
                                                   /*supports_cuda=*/0,
                                                   /*checksum=*/0,
                                                   /*max_sender_ranks=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-transport-sparse", "0.1.0",
                mlpt::sdk::transport_component<SparseTransport>(
                    "sparse",
                    "sends only the weights that changed since the last version, through the run's transport",
                    &kCapabilities))
