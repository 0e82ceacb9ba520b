#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "core/check/conformance/checks.hpp"

namespace mlpt::check::conformance {
namespace {

// transport.h, Sender ranks (1.2): two sender endpoints of one group publish a version together,
// each its own shards (rows [0, 5) and [5, 10) of a, b whole on both: a replica), and a receiver
// gets the layout it asks for (columns [30, 70) of a, every row, and b) cut from both, bitwise.
void check_sender_ranks(Suite& s, const plugin::ComponentSet& set, const std::string& name,
                        const std::vector<float>& a, const std::vector<uint16_t>& b) {
  const auto& c = set.component(MLPT_COMPONENT_TRANSPORT);
  const auto* caps = c.caps<mlpt_transport_capabilities>();
  const bool has_field = caps && caps->struct_size >= MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE;
  if (!has_field || caps->max_sender_ranks < 2) {
    s.not_applicable(name, "sender_ranks_wanted_layout",
                     "capability max_sender_ranks < 2 (one sender of whole tensors)");
    return;
  }
  s.check(name, "sender_ranks_wanted_layout", [&](std::string& ev) {
    const std::string group_name = "trainer";
    int64_t global_a[2] = {10, 100}, rows_shape[2] = {5, 100}, global_b[1] = {333};
    int64_t offsets[2][2] = {{0, 0}, {5, 0}}, zero[1] = {0};
    std::vector<std::unique_ptr<components::Transport>> senders;
    std::vector<mlpt_component_group> groups;
    for (int32_t r = 0; r < 2; ++r)
      groups.push_back({MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, r, 2});
    std::string note;
    const nlohmann::json settings = transport_settings_for_check(set, 1, note);
    for (int32_t r = 0; r < 2; ++r)  // the senders first: a receiver may wait at create for their addresses
      senders.push_back(std::make_unique<components::Transport>(
          c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance-ranks", &groups[static_cast<size_t>(r)]));
    components::Transport receiver(c, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance-ranks");
    int64_t part_shape[2] = {10, 40}, part_offsets[2] = {0, 30};
    std::vector<mlpt_named_tensor> want(2);
    want[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
               {"a", 1},
               DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, part_shape, nullptr, 0}};
    want[1] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
               {"b", 1},
               DLTensor{nullptr, {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, global_b, nullptr, 0}};
    std::vector<mlpt_tensor_shard> want_shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, global_a, part_offsets},
                                                  {MLPT_TENSOR_SHARD_STRUCT_SIZE, global_b, zero}};
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver.receive(1, 30000, {want.data(), want_shards.data(), want.size()});
      bool same = r.count == 2 && r.tensors[0].tensor.ndim == 2 && r.tensors[0].tensor.shape[0] == 10 &&
                  r.tensors[0].tensor.shape[1] == 40;
      const auto* part = same ? static_cast<const float*>(r.tensors[0].tensor.data) : nullptr;
      for (int64_t row = 0; same && row < 10; ++row)
        same = std::memcmp(part + row * 40, a.data() + row * 100 + 30, 40 * 4) == 0;
      same = same && std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      receiver.release(r.version);
      return same;
    });
    // Each rank sends from a thread of its own, as trainer ranks in their own processes would.
    std::vector<std::future<void>> sent;
    for (int32_t r = 0; r < 2; ++r) {
      sent.push_back(std::async(std::launch::async, [&, r] {
        std::vector<mlpt_named_tensor> mine(2);
        mine[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
                   {"a", 1},
                   DLTensor{const_cast<float*>(a.data()) + r * 500,
                            {kDLCPU, 0},
                            2,
                            {kDLFloat, 32, 1},
                            rows_shape,
                            nullptr,
                            0}};
        mine[1] = {
            MLPT_NAMED_TENSOR_STRUCT_SIZE,
            {"b", 1},
            DLTensor{
                const_cast<uint16_t*>(b.data()), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, global_b, nullptr, 0}};
        std::vector<mlpt_tensor_shard> shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, global_a, offsets[r]},
                                                 {MLPT_TENSOR_SHARD_STRUCT_SIZE, global_b, zero}};
        senders[static_cast<size_t>(r)]->send(1, mine.data(), mine.size(), 30000, shards.data());
      }));
    }
    for (auto& f : sent) f.get();
    const bool same = got.get();
    ev = std::string(
             "2 sender ranks (rows [0, 5) and [5, 10) of fp32 [10,100], bf16 [333] on both); asked for "
             "columns [30, 70) "
             "of every row and b whole: ") +
         (same ? "got exactly those, bitwise equal" : "DIFFER") + note;
    return same;
  });
}

}  // namespace

void check_transport(Suite& s, const plugin::ComponentSet& set) {
  const auto& c = set.component(MLPT_COMPONENT_TRANSPORT);
  const std::string name = "transport " + c.name;
  std::unique_ptr<components::Transport> receiver, sender;
  std::vector<float> a(1000);
  std::vector<uint16_t> b(333);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i)) * 1e3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(i * 977);
  int64_t sa[2] = {10, 100}, sb[1] = {333};
  std::vector<mlpt_named_tensor> tensors(2);
  tensors[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
                {"a", 1},
                DLTensor{a.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, nullptr, 0}};
  tensors[1] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
                {"b", 1},
                DLTensor{b.data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, sb, nullptr, 0}};
  s.check(name, "round_trip_bitwise", [&](std::string& ev) {
    // The sender first: a receiver that finds its sender through the key-value store (ucx) waits
    // at create for the sender's address.
    std::string note;
    const nlohmann::json settings = transport_settings_for_check(set, 1, note);
    sender = std::make_unique<components::Transport>(c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance");
    receiver =
        std::make_unique<components::Transport>(c, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance");
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver->receive(1, 30000);
      bool same = r.count == 2 && std::memcmp(r.tensors[0].tensor.data, a.data(), a.size() * 4) == 0 &&
                  std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      receiver->release(r.version);
      return same;
    });
    sender->send(1, tensors.data(), tensors.size(), 30000);
    bool same = got.get();
    ev = std::string("2 tensors (fp32 [10,100], bf16 [333]) ") + (same ? "arrived bitwise equal" : "DIFFER") +
         note;
    return same;
  });
  const auto* caps = c.caps<mlpt_transport_capabilities>();
  s.check(name, "declared_reach_consistent", [&](std::string& ev) {
    // One process cannot exercise another process or node (a run across processes does); what it can
    // hold the transport to is a reach that makes sense: a transport that crosses nodes crosses processes.
    ev = "cross_process = " + std::to_string(caps->cross_process) +
         ", cross_node = " + std::to_string(caps->cross_node) +
         (caps->cross_node && !caps->cross_process ? ": crosses nodes but NOT processes" : ": consistent") +
         " (checked in one process; a run across processes exercises the reach itself)";
    return !caps->cross_node || caps->cross_process;
  });
  if (!caps->checksum) {
    s.not_applicable(name, "checksum_round_trip", "capability checksum = 0");
  } else {
    s.check(name, "checksum_round_trip", [&](std::string& ev) {
      std::string note;
      nlohmann::json settings = transport_settings_for_check(set, 1, note);
      if (!settings.is_object()) settings = nlohmann::json::object();
      settings["verify_checksum"] = true;
      components::Transport checked_sender(c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance-checksum");
      components::Transport checked_receiver(c, settings, MLPT_TRANSPORT_RECEIVER,
                                             "mlpt-conformance-checksum");
      auto got = std::async(std::launch::async, [&] {
        auto r = checked_receiver.receive(1, 30000);
        bool same = r.count == 2 && std::memcmp(r.tensors[0].tensor.data, a.data(), a.size() * 4) == 0 &&
                    std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
        checked_receiver.release(r.version);
        return same;
      });
      checked_sender.send(1, tensors.data(), tensors.size(), 30000);
      const bool same = got.get();
      ev = std::string("with verify_checksum = true the 2 tensors ") +
           (same ? "arrived bitwise equal" : "DIFFER") + note;
      return same;
    });
  }
  if (!sender) return;
  // Versions only go up: sending version 1 again, or 0, must be refused (no receiver waits for it).
  s.check(name, "versions_monotonic", [&](std::string& ev) {
    std::string refused;
    for (uint64_t v : {1ull, 0ull}) {
      try {
        sender->send(v, tensors.data(), tensors.size(), 1000);
        ev = "sending version " + std::to_string(v) + " after version 1 was ACCEPTED";
        return false;
      } catch (const Error& e) {
        refused += (refused.empty() ? "" : "; ") + std::string(e.what()).substr(0, 100);
      }
    }
    ev = "after version 1, versions 1 and 0 were refused: " + refused;
    return true;
  });
  // transport.h: receive gives MLPT_DEADLINE_EXCEEDED after timeout_ms when no newer version comes.
  s.check(name, "receive_times_out", [&](std::string& ev) {
    const auto started = std::chrono::steady_clock::now();
    try {
      auto r = receiver->receive(2, 300);
      receiver->release(r.version);
      ev = "receive(min_version 2) with nothing sent RETURNED version " + std::to_string(r.version);
      return false;
    } catch (const Error& e) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ev = "receive(min_version 2, 300 ms) with nothing sent: code " + std::to_string(e.code()) + " after " +
           std::to_string(took) + " s (MLPT_DEADLINE_EXCEEDED = " + std::to_string(MLPT_DEADLINE_EXCEEDED) +
           ")";
      return e.code() == MLPT_DEADLINE_EXCEEDED && took < 10;
    }
  });
  // transport.h, Receive (1.2): a receiver gets exactly the layout it asks for; a tensor it wants as
  // published is handed over as it is (zero-copy where the transport is).
  if (!sender->bindable()) {
    const std::string why =
        "the transport speaks ABI 1." + std::to_string(c.abi_minor()) + " (whole tensors only)";
    s.not_applicable(name, "wanted_layout_bitwise", why);
    s.not_applicable(name, "uncut_tensor_handed_over", why);
    s.not_applicable(name, "sender_ranks_wanted_layout", why);
    return;
  }
  // Rows [2, 7) and columns [30, 70) of a, and b whole.
  int64_t part_shape[2] = {5, 40}, part_offsets[2] = {2, 30}, zero[1] = {0};
  std::vector<mlpt_named_tensor> want(2);
  want[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE,
             {"a", 1},
             DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, part_shape, nullptr, 0}};
  want[1] = tensors[1];
  want[1].tensor.data = nullptr;
  std::vector<mlpt_tensor_shard> want_shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, sa, part_offsets},
                                                {MLPT_TENSOR_SHARD_STRUCT_SIZE, sb, zero}};
  bool handed_over = false;
  s.check(name, "wanted_layout_bitwise", [&](std::string& ev) {
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver->receive(2, 30000, {want.data(), want_shards.data(), want.size()});
      bool same = r.count == 2 && r.tensors[0].tensor.ndim == 2 && r.tensors[0].tensor.shape[0] == 5 &&
                  r.tensors[0].tensor.shape[1] == 40 && r.shards && r.shards[0].offsets[0] == 2 &&
                  r.shards[0].offsets[1] == 30;
      const auto* part = same ? static_cast<const float*>(r.tensors[0].tensor.data) : nullptr;
      for (int64_t row = 0; same && row < 5; ++row)
        same = std::memcmp(part + row * 40, a.data() + (row + 2) * 100 + 30, 40 * 4) == 0;
      same = same && std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      handed_over = r.count == 2 && r.tensors[1].tensor.data == b.data();
      receiver->release(r.version);
      return same;
    });
    sender->send(2, tensors.data(), tensors.size(), 30000);
    const bool same = got.get();
    ev = std::string("asked for rows [2, 7) x columns [30, 70) of fp32 [10,100] and bf16 [333] whole: ") +
         (same ? "got exactly those, bitwise equal" : "DIFFER");
    return same;
  });
  check_sender_ranks(s, set, name, a, b);
  if (!c.caps<mlpt_transport_capabilities>()->zero_copy) {
    s.not_applicable(name, "uncut_tensor_handed_over", "capability zero_copy = 0");
    return;
  }
  s.record(name, "uncut_tensor_handed_over", handed_over,
           handed_over ? "the receiver's b is the sender's memory"
                       : "the receiver's b is a copy although zero_copy = 1");
}

}  // namespace mlpt::check::conformance
