// The sparse refit's transport (plugins/transport_sparse) wrapping the config's, as a run with
// [run] refit = "sparse" composes it (refit/sparse_refit_transport.hpp): the transport.h promises
// held against the wrapped endpoints, plus what only a wrapper has (a delta carries a changed
// version bit for bit, and a wrapper given nothing to wrap refuses to exist).
#include <cmath>
#include <cstring>
#include <future>

#include "core/check/conformance/checks.hpp"
#include "core/refit/sparse_refit_transport.hpp"

namespace mlpt::check::conformance {
namespace {

struct Weights {
  std::vector<float> a = std::vector<float>(1000);
  std::vector<uint16_t> b = std::vector<uint16_t>(333);
  int64_t sa[2] = {10, 100}, sb[1] = {333};
  std::vector<mlpt_named_tensor> views;
  Weights() {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(static_cast<double>(i)) * 1e3);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(i * 977);
    views = {{MLPT_NAMED_TENSOR_STRUCT_SIZE,
              {"a", 1},
              DLTensor{a.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, nullptr, 0}},
             {MLPT_NAMED_TENSOR_STRUCT_SIZE,
              {"b", 1},
              DLTensor{b.data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, sb, nullptr, 0}}};
  }
  bool same(const components::Transport::Received& r) const {
    return r.count == 2 && std::memcmp(r.tensors[0].tensor.data, a.data(), a.size() * 4) == 0 &&
           std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
  }
};

// Sends `version` of `w` through `tx` while `rx` receives it; true when it arrived bitwise.
bool round_trip(components::Transport& tx, components::Transport& rx, const Weights& w, uint64_t version) {
  auto got = std::async(std::launch::async, [&] {
    auto r = rx.receive(version, 30000);
    const bool same = r.version == version && w.same(r);
    rx.release(r.version);
    return same;
  });
  tx.send(version, w.views.data(), w.views.size(), 30000);
  return got.get();
}

}  // namespace

void check_sparse_refit(Suite& s, const plugin::ComponentSet& set, const run::RunConfig& c) {
  if (c.run.refit != "sparse") return;
  const std::string inner_name = set.component(MLPT_COMPONENT_TRANSPORT).name;
  const std::string name = "transport sparse (over " + inner_name + ")";
  std::string note;
  const nlohmann::json settings = transport_settings_for_check(set, 1, note);
  const auto& inner = set.component(MLPT_COMPONENT_TRANSPORT);
  // The inner endpoints first (a receiver may wait at create for its sender), then the wrappers.
  std::unique_ptr<components::Transport> inner_tx, inner_rx, tx, rx;
  sdk::WrappedTransportExtension tx_ext{}, rx_ext{};
  Weights w;
  s.check(name, "round_trip_bitwise", [&](std::string& ev) {
    inner_tx = std::make_unique<components::Transport>(inner, settings, MLPT_TRANSPORT_SENDER,
                                                       "mlpt-conformance-sparse");
    inner_rx = std::make_unique<components::Transport>(inner, settings, MLPT_TRANSPORT_RECEIVER,
                                                       "mlpt-conformance-sparse");
    tx = refit::wrap_sparse(set, *inner_tx, MLPT_TRANSPORT_SENDER, "mlpt-conformance-sparse",
                            nlohmann::json::object(), tx_ext);
    rx = refit::wrap_sparse(set, *inner_rx, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance-sparse",
                            nlohmann::json::object(), rx_ext);
    const bool same = round_trip(*tx, *rx, w, 1);
    ev = std::string("2 tensors (fp32 [10,100], bf16 [333]) as the first, full version ") +
         (same ? "arrived bitwise equal" : "DIFFER") + note;
    return same;
  });
  if (!tx) return;
  s.check(name, "delta_round_trip_bitwise", [&](std::string& ev) {
    w.a[17] += 1.0f, w.b[300] ^= 1u;  // two elements change, as a small optimizer step
    const bool same = round_trip(*tx, *rx, w, 2);
    ev = std::string("version 2 with 2 elements changed (sent as a delta) ") +
         (same ? "arrived bitwise equal" : "DIFFERS");
    return same;
  });
  s.check(name, "versions_monotonic", [&](std::string& ev) {
    for (uint64_t v : {2ull, 0ull}) {
      try {
        tx->send(v, w.views.data(), w.views.size(), 1000);
        ev = "sending version " + std::to_string(v) + " after version 2 was ACCEPTED";
        return false;
      } catch (const Error& e) {
        ev += (ev.empty() ? "" : "; ") + std::string(e.what()).substr(0, 100);
      }
    }
    ev = "after version 2, versions 2 and 0 were refused: " + ev;
    return true;
  });
  s.check(name, "receive_times_out", [&](std::string& ev) {
    try {
      auto r = rx->receive(3, 300);
      rx->release(r.version);
      ev = "receive(min_version 3) with nothing sent RETURNED version " + std::to_string(r.version);
      return false;
    } catch (const Error& e) {
      ev = "receive(min_version 3, 300 ms) with nothing sent: code " + std::to_string(e.code()) +
           " (MLPT_DEADLINE_EXCEEDED = " + std::to_string(MLPT_DEADLINE_EXCEEDED) + ")";
      return e.code() == MLPT_DEADLINE_EXCEEDED;
    }
  });
  s.check(name, "refuses_nothing_to_wrap", [&](std::string& ev) {
    const auto sparse =
        set.extra(MLPT_COMPONENT_TRANSPORT, refit::kSparseTransportPlugin, refit::kSparseTransportName);
    try {
      components::Transport alone(sparse, nlohmann::json::object(), MLPT_TRANSPORT_SENDER,
                                  "mlpt-conformance-sparse-alone");
      ev = "created without an inner endpoint";
      return false;
    } catch (const Error& e) {
      ev = std::string("without an inner endpoint, create refused: ") + e.what();
      return e.code() == MLPT_FAILED_PRECONDITION;
    }
  });
  // The wrappers go before the endpoints they wrap.
  rx.reset(), tx.reset();
}

}  // namespace mlpt::check::conformance
