// The UCX weight transport: one sender (trainer) streams versions to N receivers (engines) in other
// processes on this machine (shared memory, CMA) or on other nodes (TCP, RDMA where present).
// See README.md for the config, the protocol and the version/lifetime rules.
#include <mlpt/sdk.hpp>

#include <memory>

#include "ucx_receiver.hpp"
#include "ucx_sender.hpp"

namespace {

using mlpt::sdk::Error;
namespace ucx = mlpt::transport::ucx;

class UcxTransport final : public mlpt::sdk::Transport {
 public:
  UcxTransport(std::string_view config_json, mlpt_transport_role role, std::string_view group) {
    auto config = ucx::parse_config(config_json, role == MLPT_TRANSPORT_SENDER);
    // Without an address, sender and receivers meet through the host's key-value store (ABI 1.2):
    // the sender listens on a port the system picks and publishes where it listens.
    const bool rendezvous = config.address.empty();
    const std::string key = "transport.ucx/" + std::string(group) + "/address";
    if (rendezvous) mlpt::sdk::require_kv_store("ucx transport without \"address\"");
    if (role == MLPT_TRANSPORT_SENDER) {
      if (rendezvous) config.address = "0.0.0.0:0";
      sender_ = std::make_unique<ucx::UcxSender>(std::move(config));
      if (rendezvous) mlpt::sdk::kv_put("ucx", key, sender_->reachable_address());
    } else {
      if (rendezvous) config.address = mlpt::sdk::kv_get("ucx", key, config.timeout_ms);
      receiver_ = std::make_unique<ucx::UcxReceiver>(std::move(config));
    }
  }

  void send(const mlpt_transport_send_args& args) override {
    if (!sender_) throw Error(MLPT_FAILED_PRECONDITION, "ucx: send on a receiver endpoint");
    sender_->send(args);
  }
  void receive(mlpt_transport_receive_args& args) override {
    if (!receiver_) throw Error(MLPT_FAILED_PRECONDITION, "ucx: receive on a sender endpoint");
    receiver_->receive(args);
  }
  void release(uint64_t version) override {
    if (!receiver_) throw Error(MLPT_FAILED_PRECONDITION, "ucx: release on a sender endpoint");
    receiver_->release(version);
  }

 private:
  std::unique_ptr<ucx::UcxSender> sender_;
  std::unique_ptr<ucx::UcxReceiver> receiver_;
};

const mlpt_transport_capabilities kCapabilities = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE, /*zero_copy=*/0,
                                                   /*cross_process=*/1, /*cross_node=*/1, /*supports_cuda=*/0,
                                                   /*checksum=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-transport-ucx", "0.1.0",
                mlpt::sdk::transport_component<UcxTransport>(
                    "ucx", "bucketed weight streaming over UCX (shared memory, CMA, TCP, RDMA)", &kCapabilities))
