// The sparse refit from a trainer's change list (mlpt/sdk/changed_elements.hpp): a delta encoded
// from marks alone equals, byte for byte, the one found by comparing the versions when the marks
// are exact, and still rebuilds the new version when they also mark unchanged elements; the
// sender uses a list only when it counts from the version it sent last, and otherwise sends the
// version whole (it keeps no copy to compare against once it gets lists); a marked delta that was
// changed on the way is refused before anything is applied.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "exported_weights.hpp"
#include "mlpt/sdk/changed_elements.hpp"
#include "mlpt/sdk/error.hpp"
#include "refit_receiver.hpp"
#include "refit_sender.hpp"
#include "sparse_delta.hpp"

using namespace mlpt::sparse_refit;
using mlpt::sdk::ChangedElementsExtension;
using mlpt::sdk::Error;

namespace {

std::vector<SimdPath> runnable_paths() {
  std::vector<SimdPath> out;
  for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512})
    if (simd_path_supported(p)) out.push_back(p);
  return out;
}

// The writer's list for `m`'s marks, counting from `since`.
struct List {
  std::vector<const uint64_t*> masks;
  ChangedElementsExtension entry{};
  List(const refit_test::ExportedWeights& m, uint64_t since) {
    for (const auto& mk : m.marks) masks.push_back(mk.data());
    entry.header = {sizeof(ChangedElementsExtension), mlpt::sdk::kChangedElementsExtension, nullptr};
    entry.since_version = since;
    entry.masks = masks.data();
    entry.num_tensors = masks.size();
  }
};

void require_equal(const std::vector<mlpt_named_tensor>& rebuilt, const refit_test::ExportedWeights& m) {
  REQUIRE(rebuilt.size() == m.data.size());
  for (size_t i = 0; i < rebuilt.size(); ++i) {
    INFO(m.names[i]);
    CHECK(std::memcmp(rebuilt[i].tensor.data, m.data[i].data(), m.data[i].size()) == 0);
  }
}

}  // namespace

TEST_CASE(
    "a delta from exact marks is the comparing encoder's bytes; extra marks still rebuild the version") {
  std::mt19937_64 rng(7);
  for (const int width : {1, 2, 4, 8})
    for (const int64_t numel : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1000}, int64_t{4099}})
      for (const double fraction : {0.0, 0.01, 0.3, 1.0})
        for (const SimdPath path : runnable_paths()) {
          INFO("width " << width << ", " << numel << " elements, " << fraction << " changed, path "
                        << simd_path_name(path));
          const size_t w = static_cast<size_t>(width), words = (static_cast<size_t>(numel) + 63) / 64;
          std::vector<std::byte> prev(w * static_cast<size_t>(numel)), next;
          for (auto& b : prev) b = static_cast<std::byte>(rng());
          next = prev;
          std::vector<uint64_t> exact(words, 0);
          for (int64_t i = 0; i < numel; ++i)
            if (std::uniform_real_distribution<double>(0, 1)(rng) < fraction) {
              next[static_cast<size_t>(i) * w] ^= std::byte{0x21};
              exact[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
            }
          std::vector<std::byte> compared, marked;
          const DeltaStats c = encode_delta(prev.data(), next.data(), numel, width, compared, path);
          const DeltaStats m = encode_marked(exact.data(), next.data(), numel, width, marked, path);
          CHECK(m.changed == c.changed);
          CHECK(m.form == c.form);
          CHECK(marked == compared);

          // Marks on unchanged elements too, and garbage past the last element: the values sent
          // for them are the ones the receiver holds, bits past numel are ignored.
          std::vector<uint64_t> loose = exact;
          for (auto& word : loose) word |= rng() & rng();
          if (numel % 64 != 0) loose.back() |= ~uint64_t{0} << (numel % 64);
          std::vector<std::byte> sent;
          const DeltaStats l = encode_marked(loose.data(), next.data(), numel, width, sent, path);
          CHECK(l.changed >= m.changed);
          CHECK(l.changed <= numel);
          std::vector<std::byte> rebuilt = prev;
          apply_delta(sent.data(), sent.size(), rebuilt.data(), numel, width, "w", path);
          CHECK(rebuilt == next);
        }
}

TEST_CASE(
    "a sender given change lists sends marked deltas that rebuild every version, and goes whole when a "
    "list does not count from its last version") {
  refit_test::ExportedWeights m;
  RefitSender sender(5);
  RefitReceiver receiver;
  auto full = sender.prepare(1, m.views.data(), m.views.size());
  require_equal(receiver.apply(1, full.data(), full.size()), m);

  uint64_t version = 1;
  auto send = [&](const ChangedElementsExtension* list) -> const VersionStats& {
    const auto& msg = sender.prepare(++version, m.views.data(), m.views.size(), false, list);
    require_equal(receiver.apply(version, msg.data(), msg.size()), m);
    return sender.stats();
  };
  // Two steps between publishes: the list is the OR of both.
  m.clear_marks();
  m.step(3);
  m.step(4);
  {
    List list(m, 1);
    const VersionStats& s = send(&list.entry);
    CHECK_FALSE(s.full);
    CHECK(s.marked);
    int64_t marked = 0;
    for (const auto& mk : m.marks)
      for (uint64_t word : mk) marked += __builtin_popcountll(word);
    CHECK(s.changed == marked);
    CHECK(s.bytes < m.bytes() / 10);
  }
  SECTION("every further version from its list, a full one every full_every") {
    for (int k = 0; k < 5; ++k) {
      m.clear_marks();
      m.step(2);
      List list(m, version);
      const VersionStats& s = send(&list.entry);
      INFO("version " << version);
      CHECK(s.full == (version == 6));  // full_every 5: versions 1 and 6
      CHECK(s.marked == !s.full);
    }
  }
  SECTION("a list from another version, a missing mask or no list: the version goes whole") {
    m.clear_marks();
    m.step(2);
    List stale(m, version - 1);
    CHECK(send(&stale.entry).full);
    m.clear_marks();
    m.step(2);
    List holed(m, version);
    holed.masks[1] = nullptr;
    CHECK(send(&holed.entry).full);
    m.clear_marks();
    m.step(2);
    CHECK(send(nullptr).full);  // it keeps no copy to compare against
    m.clear_marks();
    m.step(2);
    List list(m, version);
    CHECK(send(&list.entry).marked);
  }
  SECTION("a marked delta changed on the way is refused before it is applied, and a full refit heals") {
    m.clear_marks();
    m.step(2);
    List list(m, version);
    auto msg = sender.prepare(++version, m.views.data(), m.views.size(), false, &list.entry);
    REQUIRE(sender.stats().marked);
    auto* blob = static_cast<std::byte*>(msg[3].tensor.data);
    blob[msg[3].tensor.shape[0] - 1] ^= std::byte{1};
    try {
      receiver.apply(version, msg.data(), msg.size());
      FAIL("the receiver applied a changed delta");
    } catch (const Error& e) {
      CHECK(e.code() == MLPT_DATA_LOSS);
      CHECK_THAT(std::string(e.what()),
                 Catch::Contains("'layers.0.mlp.bf16'") && Catch::Contains("differs from the one sent"));
    }
    CHECK(receiver.version() == 0);
    auto heal = sender.prepare(++version, m.views.data(), m.views.size(), true);
    require_equal(receiver.apply(version, heal.data(), heal.size()), m);
  }
}

TEST_CASE("check_change_lists refuses a list that leaves a change unmarked, naming it, and sends nothing") {
  refit_test::ExportedWeights m;
  RefitSender sender(0, /*check_lists=*/true);
  RefitReceiver receiver;
  auto full = sender.prepare(1, m.views.data(), m.views.size());
  receiver.apply(1, full.data(), full.size());
  m.clear_marks();
  m.step(3);
  // Element 5 of the BF16 tensor changes, and the list does not say so.
  m.data[2][5 * 2] ^= std::byte{0x40};
  m.marks[2][0] &= ~(uint64_t{1} << 5);
  List short_list(m, 1);
  try {
    sender.prepare(2, m.views.data(), m.views.size(), false, &short_list.entry);
    FAIL("a list missing a change was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == MLPT_FAILED_PRECONDITION);
    CHECK_THAT(std::string(e.what()), Catch::Contains("element 5 of 'layers.0.mlp.bf16' unmarked") &&
                                          Catch::Contains("since version 1"));
  }
  // The sender is where it was: the list with the change marked (and more) still counts from 1.
  m.marks[2][0] |= uint64_t{1} << 5 | uint64_t{1} << 6;
  List list(m, 1);
  const auto& msg = sender.prepare(2, m.views.data(), m.views.size(), false, &list.entry);
  CHECK(sender.stats().marked);
  require_equal(receiver.apply(2, msg.data(), msg.size()), m);
}
