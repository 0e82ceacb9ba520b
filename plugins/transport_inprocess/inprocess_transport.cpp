// The in-process weight transport: zero-copy hand-over of DLPack tensors between a trainer and
// engines living in one process. Endpoints with the same `group` meet in group_registry; the rules
// on versions and lifetimes are written out in group_registry.hpp and README.md.
#include <mlpt/sdk.hpp>

#include <mlpt/sdk/settings.hpp>

#include <algorithm>

#include "group_registry.hpp"

namespace {

using mlpt::sdk::Error;
using mlpt::transport::inprocess::Group;
using mlpt::transport::inprocess::Published;
using mlpt::transport::inprocess::ReceiverSlot;
using Clock = std::chrono::steady_clock;

constexpr int32_t kMaxSenderRanks = 1024;  // capabilities.max_sender_ranks

struct Config {
  size_t receivers = 1;
  int64_t timeout_ms = 10000;  // how long destroying the sender waits for receivers to release
};

Config parse_config(std::string_view text) {
  mlpt::sdk::Settings s(text, "transport inprocess");
  Config c;
  c.receivers = static_cast<size_t>(s.integer_or("receivers", 1, 1));
  c.timeout_ms = s.integer_or("timeout_ms", c.timeout_ms);
  s.reject_unknown();
  return c;
}

// Waits on `g.changed` until `ready()` or the timeout (< 0: forever). Returns ready().
template <class Pred>
bool wait_for(Group& g, std::unique_lock<std::mutex>& lock, int64_t timeout_ms, Pred ready) {
  if (timeout_ms < 0) {
    g.changed.wait(lock, ready);
    return true;
  }
  return g.changed.wait_until(lock, Clock::now() + std::chrono::milliseconds(timeout_ms), ready);
}

class InProcessTransport final : public mlpt::sdk::Transport {
 public:
  // Senders may be several ranks (a trainer group); the adapter cuts receivers' layouts.
  static constexpr bool kCarriesShards = true;

  InProcessTransport(std::string_view config_json, mlpt_transport_role role, std::string_view group,
                     const mlpt_component_group* ranks)
      : config_(parse_config(config_json)), role_(role), group_name_(group),
        group_(mlpt::transport::inprocess::group_named(group_name_)) {
    std::lock_guard lock(group_->mutex);
    if (role_ == MLPT_TRANSPORT_SENDER) {
      rank_ = ranks ? ranks->rank : 0;
      const int32_t size = ranks ? ranks->size : 1;
      if (size < 1 || size > kMaxSenderRanks || rank_ < 0 || rank_ >= size)
        throw Error(MLPT_INVALID_ARGUMENT, "inprocess: sender rank " + std::to_string(rank_) + " of a group of " + std::to_string(size));
      if (!group_->has_sender()) {  // the first sender rank sets the group up
        if (group_->receivers.size() > config_.receivers)
          throw Error(MLPT_FAILED_PRECONDITION, "inprocess: group '" + group_name_ + "' already has " +
                                                    std::to_string(group_->receivers.size()) + " receivers, more than \"receivers\": " +
                                                    std::to_string(config_.receivers));
        group_->sender_ranks = size;
        group_->rank_attached.assign(static_cast<size_t>(size), false);
        group_->rank_last_version.assign(static_cast<size_t>(size), 0);
        group_->sender_left = false;
        group_->expected_receivers = config_.receivers;
        group_->last_version = 0;
        group_->partial.clear();
        group_->newest.reset();
      } else if (group_->sender_ranks != size) {
        throw Error(MLPT_FAILED_PRECONDITION, "inprocess: group '" + group_name_ + "' has " + std::to_string(group_->sender_ranks) +
                                                  " sender ranks; this sender says " + std::to_string(size));
      }
      if (group_->rank_attached[static_cast<size_t>(rank_)])
        throw Error(MLPT_ALREADY_EXISTS, "inprocess: group '" + group_name_ + "' already has a sender" +
                                             (size > 1 ? " rank " + std::to_string(rank_) : std::string()));
      group_->rank_attached[static_cast<size_t>(rank_)] = true;
    } else {
      if (group_->has_sender() && group_->receivers.size() >= group_->expected_receivers)
        throw Error(MLPT_RESOURCE_EXHAUSTED, "inprocess: group '" + group_name_ + "' already has its " +
                                                 std::to_string(group_->expected_receivers) + " receivers");
      slot_.name = "receiver #" + std::to_string(group_->receivers_ever++) + " of group '" + group_name_ + "'";
      group_->receivers.push_back(&slot_);
    }
    group_->changed.notify_all();
  }

  ~InProcessTransport() override {
    std::unique_lock lock(group_->mutex);
    if (role_ == MLPT_TRANSPORT_SENDER) {
      // Rule 5: the receivers are looking at our memory; give them the timeout to let go.
      bool released = wait_for(*group_, lock, config_.timeout_ms, [&] { return holders_older_than(UINT64_MAX).empty(); });
      if (!released)
        mlpt::sdk::log(MLPT_LOG_WARNING, "transport.inprocess",
                       "sender of group '" + group_name_ + "' destroyed while " + holders_older_than(UINT64_MAX) +
                           " still hold its tensors; their pointers are no longer guaranteed");
      group_->rank_attached[static_cast<size_t>(rank_)] = false;
      group_->sender_left = true;
      group_->newest.reset();  // it points into this rank's memory
      group_->partial.clear();
    } else {
      auto& r = group_->receivers;
      r.erase(std::remove(r.begin(), r.end(), &slot_), r.end());
    }
    group_->changed.notify_all();
  }

  void send(const mlpt_transport_send_args& args) override {
    if (role_ != MLPT_TRANSPORT_SENDER) throw Error(MLPT_FAILED_PRECONDITION, "inprocess: send on a receiver endpoint");
    const mlpt_tensor_shard* shards = mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_send_args, shards)) ? args.shards : nullptr;
    // Before locking: copying names, shapes and descriptors is the only work.
    auto part = Published::copy(args.version, args.tensors, shards, args.num_tensors);
    // Zero-copy: the receivers read what the sender wrote, so they wait for what it waits for.
    if (mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_send_args, ready)) && args.ready) part->ready = *args.ready;
    std::unique_lock lock(group_->mutex);
    const uint64_t previous = group_->rank_last_version[static_cast<size_t>(rank_)];
    if (args.version <= previous)
      throw Error(MLPT_INVALID_ARGUMENT, "inprocess: version " + std::to_string(args.version) +
                                             " is not greater than the previous send's " + std::to_string(previous) +
                                             " (versions must strictly increase)");
    // Rule 2: every expected receiver attached, none holding an older version.
    bool ready = wait_for(*group_, lock, args.timeout_ms, [&] {
      return group_->receivers.size() >= group_->expected_receivers && holders_older_than(args.version).empty();
    });
    if (!ready) {
      std::string why = group_->receivers.size() < group_->expected_receivers
                            ? std::to_string(group_->receivers.size()) + " of " + std::to_string(group_->expected_receivers) +
                                  " receivers attached"
                            : holders_older_than(args.version) + " did not release version " +
                                  std::to_string(group_->newest ? group_->newest->version : 0);
      throw Error(MLPT_DEADLINE_EXCEEDED, "inprocess: send of version " + std::to_string(args.version) + " to group '" +
                                              group_name_ + "' timed out after " + std::to_string(args.timeout_ms) + " ms: " + why);
    }
    group_->rank_last_version[static_cast<size_t>(rank_)] = args.version;
    auto& parts = group_->partial[args.version];
    parts.resize(static_cast<size_t>(group_->sender_ranks));
    parts[static_cast<size_t>(rank_)] = std::move(part);
    if (std::all_of(parts.begin(), parts.end(), [](const auto& p) { return p != nullptr; })) {
      group_->newest = Published::join(args.version, parts);
      group_->last_version = args.version;
      group_->partial.erase(group_->partial.begin(), group_->partial.upper_bound(args.version));
    }
    group_->changed.notify_all();
  }

  void receive(mlpt_transport_receive_args& args) override {
    if (role_ != MLPT_TRANSPORT_RECEIVER) throw Error(MLPT_FAILED_PRECONDITION, "inprocess: receive on a sender endpoint");
    std::unique_lock lock(group_->mutex);
    if (slot_.held)
      throw Error(MLPT_FAILED_PRECONDITION, "inprocess: " + slot_.name + " still holds version " +
                                                std::to_string(slot_.held->version) + "; release it before receiving again");
    auto available = [&] { return group_->newest && group_->newest->version >= args.min_version; };
    bool ok = wait_for(*group_, lock, args.timeout_ms, [&] { return available() || group_->sender_left; });
    if (!ok || !available()) {
      if (group_->sender_left)
        throw Error(MLPT_UNAVAILABLE, "inprocess: the sender of group '" + group_name_ + "' went away before version " +
                                          std::to_string(args.min_version));
      throw Error(MLPT_DEADLINE_EXCEEDED,
                  "inprocess: no version >= " + std::to_string(args.min_version) + " in group '" + group_name_ + "' within " +
                      std::to_string(args.timeout_ms) + " ms (newest: " +
                      (group_->newest ? std::to_string(group_->newest->version) : std::string("none")) +
                      (group_->has_sender() ? "" : "; no sender attached") + ")");
    }
    slot_.held = group_->newest;
    slot_.last_version = slot_.held->version;
    args.out_version = slot_.held->version;
    args.out_tensors = slot_.held->tensors.data();
    args.out_num_tensors = slot_.held->tensors.size();
    if (mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)))
      args.out_shards = slot_.held->shards.empty() ? nullptr : slot_.held->shards.data();
    if (mlpt::sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_ready))) args.out_ready = slot_.held->ready;
  }

  void release(uint64_t version) override {
    if (role_ != MLPT_TRANSPORT_RECEIVER) throw Error(MLPT_FAILED_PRECONDITION, "inprocess: release on a sender endpoint");
    std::lock_guard lock(group_->mutex);
    if (!slot_.held)
      throw Error(MLPT_FAILED_PRECONDITION, "inprocess: release of version " + std::to_string(version) + " but " +
                                                slot_.name + " holds nothing");
    if (slot_.held->version != version)
      throw Error(MLPT_INVALID_ARGUMENT, "inprocess: release of version " + std::to_string(version) + " but " +
                                             slot_.name + " holds version " + std::to_string(slot_.held->version));
    slot_.held.reset();
    group_->changed.notify_all();
  }

 private:
  // "receiver #0 of group 'g', receiver #2 ..." for those holding a version < `version`; "" if none.
  std::string holders_older_than(uint64_t version) const {
    std::string out;
    for (auto* r : group_->receivers)
      if (r->held && r->held->version < version) out += (out.empty() ? "" : ", ") + r->name;
    return out;
  }

  Config config_;
  mlpt_transport_role role_;
  std::string group_name_;
  std::shared_ptr<Group> group_;
  int32_t rank_ = 0;   // senders only: this sender's rank
  ReceiverSlot slot_;  // receivers only
};

const mlpt_transport_capabilities kCapabilities = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE, /*zero_copy=*/1,
                                                   /*cross_process=*/0, /*cross_node=*/0, /*supports_cuda=*/1,
                                                   /*checksum=*/0, /*max_sender_ranks=*/kMaxSenderRanks};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-transport-inprocess", "0.1.0",
                mlpt::sdk::transport_component<InProcessTransport>(
                    "inprocess", "zero-copy hand-over of DLPack tensors within one process", &kCapabilities))
