// The UCX weight transport: one sender (trainer) streams versions to N receivers (engines) in other
// processes on this machine (shared memory, CMA) or on other nodes (TCP, RDMA where present). A
// trainer group of several ranks sends as several sender ranks, each its own shards; every receiver
// pulls from each rank just the pieces of its layout.
// See README.md for the config, the protocol and the version/lifetime rules.
#include <mlpt/sdk.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ucx_receiver.hpp"
#include "ucx_sender.hpp"

namespace {

using mlpt::sdk::Error;
namespace ucx = mlpt::transport::ucx;

// "host:port" with the port moved up by `by` (sender rank r of an explicit address listens at port + r).
std::string shifted(const std::string& address, uint32_t by) {
  if (by == 0) return address;
  auto colon = address.rfind(':');
  if (colon == std::string::npos)
    throw Error(MLPT_INVALID_ARGUMENT, "ucx address \"" + address + "\" is not \"host:port\"");
  const long port = std::strtol(address.c_str() + colon + 1, nullptr, 10) + static_cast<long>(by);
  if (port > 65535)
    throw Error(MLPT_INVALID_ARGUMENT, "ucx address \"" + address + "\": sender rank " + std::to_string(by) +
                                           " would listen at port " + std::to_string(port) + ", beyond 65535");
  return address.substr(0, colon + 1) + std::to_string(port);
}

class UcxTransport final : public mlpt::sdk::Transport {
 public:
  static constexpr bool kCarriesShards = true;  // several sender ranks, each its own shards

  UcxTransport(std::string_view config_json, mlpt_transport_role role, std::string_view group,
               const mlpt_component_group* ranks) {
    auto config = ucx::parse_config(config_json, role == MLPT_TRANSPORT_SENDER);
    // Without an address, sender ranks and receivers meet through the host's key-value store (ABI
    // 1.2): each rank listens on a port the system picks and publishes where it listens, and how
    // many ranks there are. With one, a rank r > 0 listens at the address's port + r.
    const bool rendezvous = config.address.empty();
    const std::string prefix = "transport.ucx/" + std::string(group);
    if (rendezvous) mlpt::sdk::require_kv_store("ucx transport without \"address\"");
    if (role == MLPT_TRANSPORT_SENDER) {
      const int32_t rank = ranks ? ranks->rank : 0, size = ranks ? ranks->size : 1;
      if (size < 1 || rank < 0 || rank >= size)
        throw Error(MLPT_INVALID_ARGUMENT, "ucx: sender rank " + std::to_string(rank) + " of a group of " + std::to_string(size));
      if (size > static_cast<int32_t>(ucx::kMaxSenderRanks))
        throw Error(MLPT_UNIMPLEMENTED, "ucx: a sender group of " + std::to_string(size) + " ranks; this transport takes at most " +
                                            std::to_string(ucx::kMaxSenderRanks));
      config.address = rendezvous ? "0.0.0.0:0" : shifted(config.address, static_cast<uint32_t>(rank));
      sender_ = std::make_unique<ucx::UcxSender>(std::move(config), static_cast<uint32_t>(rank), static_cast<uint32_t>(size));
      if (rendezvous) {
        // Every rank states the group's size: a rank that disagrees fails here, naming the key.
        mlpt::sdk::kv_put("ucx", prefix + "/senders", std::to_string(size));
        mlpt::sdk::kv_put("ucx", prefix + "/address/" + std::to_string(rank), sender_->reachable_address());
        if (rank == 0) mlpt::sdk::kv_put("ucx", prefix + "/address", sender_->reachable_address());
      }
    } else {
      std::vector<std::string> addresses;
      if (rendezvous) {
        const std::string size = mlpt::sdk::kv_get("ucx", prefix + "/senders", config.timeout_ms);
        const long n = std::strtol(size.c_str(), nullptr, 10);
        if (n < 1 || n > static_cast<long>(ucx::kMaxSenderRanks))
          throw Error(MLPT_DATA_LOSS, "ucx: " + prefix + "/senders in the key-value store is \"" + size + "\", not a sender count");
        for (long r = 0; r < n; ++r) addresses.push_back(mlpt::sdk::kv_get("ucx", prefix + "/address/" + std::to_string(r), config.timeout_ms));
      } else {
        for (uint32_t r = 0; r < config.senders; ++r) addresses.push_back(shifted(config.address, r));
      }
      receiver_ = std::make_unique<ucx::UcxReceiver>(std::move(config), std::move(addresses));
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
                                                   /*checksum=*/1, /*max_sender_ranks=*/ucx::kMaxSenderRanks};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-transport-ucx", "0.1.0",
                mlpt::sdk::transport_component<UcxTransport>(
                    "ucx", "bucketed weight streaming over UCX (shared memory, CMA, TCP, RDMA)", &kCapabilities))
