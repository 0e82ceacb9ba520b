// The ops that write a working weight and mark the elements whose bits changed (ops/ops.hpp,
// to_bf16_marking and copy_marking) on the CPU backend, and assign_tensor with a mask
// (device_model/model.hpp): the written values are what to_bf16 / a copy write, the marks are the
// elements whose bits differ between the tensor before and after (tests/support/change_marks.hpp),
// ORed into the words already there; no bit past the last element and no word past the mask
// changes.
#include <catch2/catch.hpp>

#include "backends/cpu/bf16_ops.hpp"
#include "change_marks.hpp"
#include "device_model/model.hpp"
#include "device_model_fixtures.hpp"

using namespace mlpt::ref;

namespace {

constexpr uint32_t kGuard = 0xa5a5a5a5u;  // the word after a mask, which no op may touch

// Runs `mark` (the op under test) over `c`, then `second` over it when given, and checks the
// values and words against change_marks::expected with `prior` words already set.
template <class T, class Mark, class Plain>
void check_marking(int64_t n, const change_marks::Case<T>& first, const change_marks::Case<T>* second,
                   Mark mark, Plain plain) {
  std::vector<uint32_t> prior(change_marks::words(n), 0);
  if (!prior.empty()) prior[0] |= 1u;  // a mark left from before stays
  std::vector<uint32_t> words = prior;
  words.push_back(kGuard);
  std::vector<T> y = first.before;
  mark(n, first.x.data(), y.data(), words.data());
  std::vector<T> want(static_cast<size_t>(n));
  plain(n, first.x.data(), want.data());
  for (int64_t i = 0; i < n; ++i) REQUIRE(change_marks::bits_of(y[i]) == change_marks::bits_of(want[i]));
  std::vector<uint32_t> expect = change_marks::expected(first.before, y, prior);
  if (second) {  // a second write over the first's result: the marks are the OR of both
    std::vector<T> before = y;
    mark(n, second->x.data(), y.data(), words.data());
    expect = change_marks::expected(before, y, expect);
  }
  CHECK(words.back() == kGuard);
  words.pop_back();
  CHECK(words == expect);
  if (n % 32) CHECK((words.back() >> (n % 32)) == 0);  // no bit past the last element
  int64_t changed = 0, unchanged = 0;                  // the cases cover both, whatever the op does
  for (int64_t i = 0; i < n; ++i) (expect[size_t(i) / 32] >> (i % 32) & 1 ? changed : unchanged)++;
  if (n >= 6 && !second) CHECK((changed > 0 && unchanged > 0));
}

}  // namespace

TEST_CASE("ops (cpu-bf16): to_bf16_marking and copy_marking mark exactly the elements whose bits changed") {
  cpu::Bf16Ops ops;
  for (int64_t n : {1, 5, 31, 32, 33, 63, 64, 65, 127, 1001}) {
    INFO("n " << n);
    const auto b1 = change_marks::bf16_case(n, 1), b2 = change_marks::bf16_case(n, 2);
    auto to_bf16_marking = [&](int64_t k, const float* x, bf16* y, uint32_t* w) {
      ops.to_bf16_marking(k, x, y, w);
    };
    auto to_bf16 = [&](int64_t k, const float* x, bf16* y) { ops.to_bf16(k, x, y); };
    check_marking<bf16>(n, b1, nullptr, to_bf16_marking, to_bf16);
    check_marking<bf16>(n, b1, &b2, to_bf16_marking, to_bf16);
    const auto f1 = change_marks::fp32_case(n, 3), f2 = change_marks::fp32_case(n, 4);
    auto copy_marking = [&](int64_t k, const float* x, float* y, uint32_t* w) {
      ops.copy_marking(k, x, y, w);
    };
    auto copy = [&](int64_t k, const float* x, float* y) { ops.copy(y, x, size_t(k) * 4); };
    check_marking<float>(n, f1, nullptr, copy_marking, copy);
    check_marking<float>(n, f1, &f2, copy_marking, copy);
  }
  // Nothing written, nothing marked.
  uint32_t word = kGuard;
  ops.to_bf16_marking(0, nullptr, nullptr, &word);
  ops.copy_marking(0, nullptr, nullptr, &word);
  CHECK(word == kGuard);
}

TEST_CASE("device model: assign_tensor with a mask marks the changed elements of a bf16 and an fp32 tensor") {
  cpu::Bf16Ops ops;
  const Weights<float> w = model_testing::bf16_exact_weights(model_testing::small_config(1), 7);
  dev::DeviceWeights d = dev::upload_weights(ops, w);
  for (int i : {w.layout.lm_head, w.layout.final_norm}) {
    INFO("tensor " << w.layout.tensors[size_t(i)].name
                   << (dev::is_fp32_tensor(w.layout, i) ? " (fp32)" : " (bf16)"));
    const int64_t n = w.layout.tensors[size_t(i)].numel();
    std::vector<float> next = w.values[size_t(i)];
    for (int64_t k = 0; k < n; k += 3) next[size_t(k)] += 0.25f;  // every third element moves
    std::vector<uint32_t> words(change_marks::words(n), 0);
    const std::vector<float> before = dev::download_tensor(ops, d, i);
    dev::assign_tensor(ops, d, i, next.data(), words.data());
    const std::vector<float> after = dev::download_tensor(ops, d, i);
    CHECK(words == change_marks::expected(before, after, std::vector<uint32_t>(words.size(), 0)));
    int64_t marked = 0;
    for (uint32_t x : words) marked += __builtin_popcount(x);
    CHECK(marked == (n + 2) / 3);
  }
}
