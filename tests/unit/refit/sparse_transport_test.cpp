// The sparse transport plugin as the host composes it (core/refit/sparse_refit_transport.hpp): its
// endpoints wrap the in-process transport's, both real plugins loaded through the host's loader. A
// sequence of versions reaches the receiver bit for bit; the first is full, the rest deltas smaller
// than the weights (or whole where the measured rates chose it, saying so), each reported to the
// host; the receiver's tensors are the plugin's copy (not the sender's memory, which the in-process
// transport would have handed over); a dense sender's version is handed over as it came; a wrapper
// without an inner endpoint, and a version that does not increase, are refused with errors that say
// so.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <future>

#include "core/plugin/component_set.hpp"
#include "core/refit/sparse_refit_transport.hpp"
#include "exported_weights.hpp"

using namespace mlpt;

namespace {

// Four times the shapes of the codec tests: deltas of a few elements are far below the weights.
struct Model : refit_test::ExportedWeights {
  Model() : ExportedWeights(4, 7) {}
};

// The run's transport (in-process) as a config names it, and the host services its plugins get.
struct Host {
  plugin::HostServices services;
  plugin::ComponentSet set;
  Host() : set(configs(), services) {}
  static std::vector<config::ComponentConfig> configs() {
    setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
    return {config::ComponentConfig{MLPT_COMPONENT_TRANSPORT,
                                    "libmlpt_transport_inprocess.so",
                                    "",
                                    nlohmann::json::object(),
                                    "test",
                                    {}}};
  }
  std::unique_ptr<components::Transport> inner(mlpt_transport_role role, const std::string& group) const {
    return std::make_unique<components::Transport>(set.component(MLPT_COMPONENT_TRANSPORT),
                                                   nlohmann::json::object(), role, group);
  }
};

struct Reports {
  std::vector<sdk::WrappedTransportReport> got;
  static void add(void* ctx, const sdk::WrappedTransportReport* r) {
    static_cast<Reports*>(ctx)->got.push_back(*r);
  }
};

bool same_as(const components::Transport::Received& r, const Model& m) {
  if (r.count != m.views.size()) return false;
  for (size_t i = 0; i < r.count; ++i)
    if (sdk::view(r.tensors[i].name) != m.names[i] ||
        std::memcmp(r.tensors[i].tensor.data, m.data[i].data(), m.data[i].size()) != 0)
      return false;
  return true;
}

mlpt_error_code code_of(const std::function<void()>& f, std::string& message) {
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
    return e.code();
  }
  return MLPT_OK;
}

}  // namespace

TEST_CASE(
    "sparse transport over inprocess: every version bit for bit, deltas after the first, each reported") {
  Host host;
  const std::string group = "sparse-versions-" + std::to_string(::getpid());
  auto inner_tx = host.inner(MLPT_TRANSPORT_SENDER, group);
  auto inner_rx = host.inner(MLPT_TRANSPORT_RECEIVER, group);
  Reports reports;
  sdk::WrappedTransportExtension tx_ext{}, rx_ext{};
  tx_ext.report_ctx = &reports;
  tx_ext.report = &Reports::add;
  auto tx =
      refit::wrap_sparse(host.set, *inner_tx, MLPT_TRANSPORT_SENDER, group, {{"full_every", 0}}, tx_ext);
  auto rx = refit::wrap_sparse(host.set, *inner_rx, MLPT_TRANSPORT_RECEIVER, group, nlohmann::json::object(),
                               rx_ext);
  CHECK(tx->bindable());  // a trainer publishes through it as through any 1.2 transport
  Model m;
  for (uint64_t v = 1; v <= 4; ++v) {
    INFO("version " << v);
    if (v > 1) m.step(5);
    auto got = std::async(std::launch::async, [&] {
      auto r = rx->receive(v, 10000);
      const bool same = r.version == v && same_as(r, m);
      const bool copied = r.count > 0 && r.tensors[0].tensor.data != m.views[0].tensor.data;
      rx->release(r.version);
      return std::pair{same, copied};
    });
    tx->send(v, m.views.data(), m.views.size(), 10000);
    const auto [same, copied] = got.get();
    CHECK(same);
    CHECK(copied);  // rebuilt into the plugin's copy, not the sender's memory
    REQUIRE(reports.got.size() == v);
    const auto& r = reports.got.back();
    CHECK(r.version == v);
    CHECK(r.dense_bytes == m.bytes());
    // The first version goes whole, the second as a delta (no rates are known before a delta). Later
    // ones are deltas unless the measured rates say whole is quicker: over this in-process wire that
    // can go either way, so such a version must say why it went whole.
    const bool by_rates = v > 2 && r.full && r.whole_by_rates;
    CHECK(r.full == (v == 1 || by_rates ? 1 : 0));
    if (r.full) {
      CHECK(r.bytes > m.bytes());  // the weights and the manifest
    } else {
      CHECK(r.whole_by_rates == 0);
      CHECK(r.changed > 0);
      CHECK(r.changed <= 5 * 3);  // at most 5 elements flipped per tensor
      CHECK(r.bytes < m.bytes() / 10);
    }
  }
}

TEST_CASE("sparse transport: a dense sender's version is handed over as it came, and bad use is refused") {
  Host host;
  const std::string group = "sparse-dense-" + std::to_string(::getpid());
  auto inner_tx = host.inner(MLPT_TRANSPORT_SENDER, group);
  auto inner_rx = host.inner(MLPT_TRANSPORT_RECEIVER, group);
  sdk::WrappedTransportExtension rx_ext{};
  auto rx = refit::wrap_sparse(host.set, *inner_rx, MLPT_TRANSPORT_RECEIVER, group, nlohmann::json::object(),
                               rx_ext);
  Model m;
  auto got = std::async(std::launch::async, [&] {
    auto r = rx->receive(1, 10000);
    const bool handed_over = r.count == m.views.size() && r.tensors[0].tensor.data == m.views[0].tensor.data;
    rx->release(r.version);
    return handed_over;
  });
  inner_tx->send(1, m.views.data(), m.views.size(), 10000);
  CHECK(got.get());  // the in-process transport's zero-copy hand-over, passed through
  // The inner version was released with the wrapper's: the inner sender may send the next one.
  std::string message;
  auto again = std::async(std::launch::async, [&] {
    auto r = rx->receive(2, 10000);
    rx->release(r.version);
    return r.version;
  });
  inner_tx->send(2, m.views.data(), m.views.size(), 10000);
  CHECK(again.get() == 2);
  CHECK(code_of([&] { rx->release(2); }, message) == MLPT_FAILED_PRECONDITION);
  CHECK_THAT(message, Catch::Contains("holds nothing"));

  SECTION("without an inner endpoint the sparse transport refuses to be created") {
    const plugin::Component sparse =
        host.set.extra(MLPT_COMPONENT_TRANSPORT, refit::kSparseTransportPlugin, "sparse");
    CHECK(code_of(
              [&] {
                components::Transport alone(sparse, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, group);
              },
              message) == MLPT_FAILED_PRECONDITION);
    CHECK_THAT(message, Catch::Contains("wraps another"));
  }
  SECTION("a version that does not increase is refused before it is encoded; the next one still arrives") {
    const std::string g2 = group + "-versions";
    auto itx = host.inner(MLPT_TRANSPORT_SENDER, g2);
    auto irx = host.inner(MLPT_TRANSPORT_RECEIVER, g2);
    sdk::WrappedTransportExtension tx_ext{}, rx2_ext{};
    auto tx = refit::wrap_sparse(host.set, *itx, MLPT_TRANSPORT_SENDER, g2, nlohmann::json::object(), tx_ext);
    auto rx2 =
        refit::wrap_sparse(host.set, *irx, MLPT_TRANSPORT_RECEIVER, g2, nlohmann::json::object(), rx2_ext);
    for (uint64_t v : {3ull, 5ull}) {
      if (v == 5) {
        m.step(3);
        CHECK(code_of([&] { tx->send(3, m.views.data(), m.views.size(), 1000); }, message) ==
              MLPT_INVALID_ARGUMENT);
        CHECK_THAT(message, Catch::Contains("not greater than the previous send's 3"));
      }
      auto r = std::async(std::launch::async, [&] {
        auto x = rx2->receive(v, 10000);
        const bool same = x.version == v && same_as(x, m);
        rx2->release(x.version);
        return same;
      });
      tx->send(v, m.views.data(), m.views.size(), 10000);
      CHECK(r.get());
    }
  }
}
