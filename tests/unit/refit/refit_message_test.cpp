// The sparse refit's two ends without a transport: a sequence of versions of FP32 and BF16 weights
// (a few elements changing per step, like an optimizer step at a small learning rate) rebuilt by
// the receiver bit for bit against the sender's tensors themselves; the first message full, then
// deltas, a full one every `full_every`; and a wrong base, a corrupted delta or a lost update
// refused with an error that says so, never applied silently.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "exported_weights.hpp"
#include "mlpt/sdk/error.hpp"
#include "refit_receiver.hpp"
#include "refit_sender.hpp"

using namespace mlpt::sparse_refit;
using mlpt::sdk::Error;

namespace {

using Model = refit_test::ExportedWeights;

void require_equal(const std::vector<mlpt_named_tensor>& rebuilt, const Model& m) {
  REQUIRE(rebuilt.size() == m.data.size());
  for (size_t i = 0; i < rebuilt.size(); ++i) {
    INFO(m.names[i]);
    CHECK(std::string(rebuilt[i].name.data, rebuilt[i].name.size) == m.names[i]);
    CHECK(rebuilt[i].tensor.dtype.bits == m.dtypes[i].bits);
    CHECK(std::vector<int64_t>(rebuilt[i].tensor.shape, rebuilt[i].tensor.shape + rebuilt[i].tensor.ndim) ==
          m.shapes[i]);
    CHECK(std::memcmp(rebuilt[i].tensor.data, m.data[i].data(), m.data[i].size()) == 0);
  }
}

std::string error_of(RefitReceiver& r, uint64_t version, const std::vector<mlpt_named_tensor>& msg,
                     mlpt_error_code code) {
  try {
    r.apply(version, msg.data(), msg.size());
  } catch (const Error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("the receiver accepted it");
  return "";
}

}  // namespace

TEST_CASE("a sequence of versions is rebuilt bit for bit: full first, then deltas, full again every N") {
  Model m;
  RefitSender sender(4);
  RefitReceiver receiver;
  uint64_t dense = 0;
  for (auto& d : m.data) dense += d.size();
  for (uint64_t v = 1; v <= 9; ++v) {
    if (v > 1) m.step(3);
    const auto& msg = sender.prepare(v, m.views.data(), m.views.size());
    const auto& s = sender.stats();
    INFO("version " << v << (s.full ? " full" : " delta"));
    CHECK(s.full == (v == 1 || v == 5 || v == 9));
    CHECK(s.dense_bytes == dense);
    if (!s.full) {
      CHECK(s.changed > 0);
      CHECK(s.changed <= 9);
      CHECK(s.bytes < dense / 10);  // a few changes: the message is a small fraction of the weights
    } else {
      CHECK(s.bytes > dense);  // the weights plus the manifest
    }
    require_equal(receiver.apply(v, msg.data(), msg.size()), m);
    CHECK(receiver.version() == v);
  }
}

TEST_CASE(
    "a delta against another version, a corrupted delta or a lost update is refused, and only a full refit "
    "is accepted next") {
  Model m;
  RefitSender sender;
  RefitReceiver receiver;
  auto full = sender.prepare(1, m.views.data(), m.views.size());
  receiver.apply(1, full.data(), full.size());

  SECTION("a delta whose base the receiver does not hold") {
    m.step(2);
    sender.prepare(2, m.views.data(), m.views.size());  // never delivered
    m.step(2);
    auto next = sender.prepare(3, m.views.data(), m.views.size());
    CHECK_THAT(error_of(receiver, 3, next, MLPT_FAILED_PRECONDITION),
               Catch::Contains("delta against version 2") && Catch::Contains("holds version 1"));
    // The copy was dropped: even the right delta is refused now; a forced full message heals.
    CHECK_THAT(error_of(receiver, 3, next, MLPT_FAILED_PRECONDITION), Catch::Contains("holds no weights"));
    auto heal = sender.prepare(4, m.views.data(), m.views.size(), true);
    require_equal(receiver.apply(4, heal.data(), heal.size()), m);
  }
  SECTION("a flipped value in a delta fails the checksum, naming the tensor") {
    m.step(2);
    auto msg = sender.prepare(2, m.views.data(), m.views.size());
    auto* blob = static_cast<std::byte*>(msg[1].tensor.data);
    blob[msg[1].tensor.shape[0] - 1] ^= std::byte{1};  // the last changed value of 'embed.weight'
    CHECK_THAT(error_of(receiver, 2, msg, MLPT_DATA_LOSS),
               Catch::Contains("'embed.weight'") && Catch::Contains("differs from the sender's"));
    CHECK(receiver.version() == 0);
  }
  SECTION("a receiver whose copy drifted (an update it never saw) is caught by the checksum") {
    m.step(2);
    auto msg = sender.prepare(2, m.views.data(), m.views.size());
    // The engine's copy of layers.0.norm.weight differs from the sender's base at one element.
    auto& held = const_cast<mlpt_named_tensor&>(receiver.apply(2, msg.data(), msg.size())[1]);
    static_cast<std::byte*>(held.tensor.data)[0] ^= std::byte{0x10};
    m.step(2);
    auto next = sender.prepare(3, m.views.data(), m.views.size());
    CHECK_THAT(error_of(receiver, 3, next, MLPT_DATA_LOSS),
               Catch::Contains("'layers.0.norm.weight'") && Catch::Contains("diverged"));
  }
  SECTION("a dense message (no manifest) or a malformed manifest") {
    CHECK_THAT(error_of(receiver, 2, m.views, MLPT_DATA_LOSS),
               Catch::Contains("does not start with 'mlpt.refit'"));
    m.step(1);
    auto msg = sender.prepare(2, m.views.data(), m.views.size());
    CHECK_THAT(error_of(receiver, 3, msg, MLPT_DATA_LOSS), Catch::Contains("the manifest says version 2"));
    auto cut = msg;
    cut.pop_back();
    CHECK_THAT(error_of(receiver, 2, cut, MLPT_DATA_LOSS), Catch::Contains("3 checksums for 2 tensors"));
  }
}

// The sender picks the form from measured rates: a wire fast enough that the whole model crosses it
// sooner than a delta can be found and applied gets the version whole; a slow one gets the delta.
// The rates are the sender's own (its last delta's encode) against the wire's as reported.
TEST_CASE("the sender sends a version whole when the measured rates say that is quicker than a delta") {
  Model m;
  RefitSender tx;
  RefitReceiver rx;
  require_equal(rx.apply(1, tx.prepare(1, m.views.data(), m.views.size()).data(), m.views.size() + 1), m);
  m.step(2);
  require_equal(rx.apply(2, tx.prepare(2, m.views.data(), m.views.size()).data(), m.views.size() + 1), m);
  CHECK_FALSE(tx.stats().full);  // no wire rate known yet: the delta
  const uint64_t dense = tx.stats().dense_bytes;
  // A wire that moves the whole model in far less time than one pass over it.
  tx.observe_send(dense, 1e-12);
  auto [delta_s, whole_s] = tx.predicted_seconds(dense);
  REQUIRE(whole_s > 0);
  CHECK(whole_s < delta_s);
  m.step(2);
  require_equal(rx.apply(3, tx.prepare(3, m.views.data(), m.views.size()).data(), m.views.size() + 1), m);
  CHECK(tx.stats().full);
  CHECK(tx.stats().whole_by_rates);
  // A wire that takes an hour for the model: a delta (its rate was measured on version 2).
  tx.observe_send(dense, 3600);
  std::tie(delta_s, whole_s) = tx.predicted_seconds(dense);
  CHECK(delta_s < whole_s);
  m.step(2);
  require_equal(rx.apply(4, tx.prepare(4, m.views.data(), m.views.size()).data(), m.views.size() + 1), m);
  CHECK_FALSE(tx.stats().full);
  CHECK_FALSE(tx.stats().whole_by_rates);
}
