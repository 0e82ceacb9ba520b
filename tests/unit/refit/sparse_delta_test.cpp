// The sparse refit encoding: round trips in every form against a plain element-by-element
// reference, the size rule (indices below ~6% changed, a bitmap up to ~94%, else dense), and
// malformed or mismatched messages refused with the tensor named and the weights unchanged.
#include "sparse_delta.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "mlpt/sdk/error.hpp"

using namespace mlpt::sparse_refit;
using mlpt::sdk::Error;

namespace {

struct Pair {
  std::vector<uint16_t> prev, next;
};

// `changed` of n elements differ (spread by a fixed stride pattern, first and last included).
Pair update_pair(int64_t n, int64_t changed, uint64_t seed) {
  Pair p{std::vector<uint16_t>(static_cast<size_t>(n)), {}};
  uint64_t x = seed * 2654435761u + 1;
  for (auto& v : p.prev) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint16_t>(x);
  }
  p.next = p.prev;
  for (int64_t j = 0; j < changed; ++j) {
    int64_t i = changed == 1 ? 0 : j * (n - 1) / (changed - 1);
    p.next[i] = static_cast<uint16_t>(p.next[i] ^ (0x0101 + j % 7));
  }
  return p;
}

std::string apply_error(const std::vector<std::byte>& blob, std::vector<uint16_t>& values) {
  try {
    apply_bf16_delta(blob.data(), blob.size(), values.data(), static_cast<int64_t>(values.size()), "w");
  } catch (const Error& e) {
    CHECK(e.code() == MLPT_DATA_LOSS);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every density round trips bit for bit, in the smallest form") {
  const int64_t n = 10000;
  for (int64_t changed : {0, 1, 10, 100, 500, 2000, 6000, 9500, 10000}) {
    INFO(changed << " changed");
    Pair p = update_pair(n, changed, static_cast<uint64_t>(changed) + 3);
    std::vector<std::byte> blob;
    DeltaStats s = encode_bf16_delta(p.prev.data(), p.next.data(), n, blob);
    CHECK(s.changed == changed);
    CHECK(s.bytes == blob.size());
    std::vector<uint16_t> engine = p.prev;
    apply_bf16_delta(blob.data(), blob.size(), engine.data(), n, "w");
    CHECK(engine == p.next);
    const size_t dense = 2 * static_cast<size_t>(n) + 32;
    CHECK(s.bytes <= dense);
    if (changed <= 500) CHECK(s.form == DeltaForm::indices);
    if (changed >= 2000 && changed <= 6000) CHECK(s.form == DeltaForm::bitmap);
    if (changed == 10000) CHECK(s.form == DeltaForm::dense);
    if (changed == 100) CHECK(s.bytes < dense / 20);
  }
  // An empty tensor.
  std::vector<std::byte> blob;
  DeltaStats s = encode_bf16_delta(nullptr, nullptr, 0, blob);
  CHECK(s.changed == 0);
  apply_bf16_delta(blob.data(), blob.size(), nullptr, 0, "empty");
}

TEST_CASE("malformed or mismatched updates are refused, naming the tensor, and change nothing") {
  Pair p = update_pair(1000, 20, 9);
  std::vector<std::byte> blob;
  encode_bf16_delta(p.prev.data(), p.next.data(), 1000, blob);
  std::vector<uint16_t> engine = p.prev;
  std::vector<uint16_t> small(999);
  CHECK_THAT(apply_error(blob, small),
             Catch::Contains("'w'") && Catch::Contains("encodes 1000 elements, the tensor has 999"));
  auto cut = blob;
  cut.pop_back();
  CHECK_THAT(apply_error(cut, engine), Catch::Contains("payload"));
  auto magic = blob;
  magic[0] = std::byte{'X'};
  CHECK_THAT(apply_error(magic, engine), Catch::Contains("not a sparse delta"));
  auto index = blob;
  index[32] = std::byte{0xff};  // first gap: an unterminated, huge LEB128
  index[33] = std::byte{0xff};
  CHECK_FALSE(apply_error(index, engine).empty());
  CHECK(engine == p.prev);  // nothing applied by any refused message
  auto form = blob;
  form[4] = std::byte{9};
  CHECK_THAT(apply_error(form, engine), Catch::Contains("unknown form 9"));
  // A bitmap whose marks disagree with its count.
  Pair q = update_pair(64, 30, 4);
  std::vector<std::byte> bm;
  REQUIRE(encode_bf16_delta(q.prev.data(), q.next.data(), 64, bm).form == DeltaForm::bitmap);
  bm[32] ^= std::byte{0x02};
  std::vector<uint16_t> qe = q.prev;
  CHECK_THAT(apply_error(bm, qe), Catch::Contains("bitmap marks"));
  CHECK(qe == q.prev);
}

TEST_CASE("FP32 and byte-wide elements round trip, and an update of another element width is refused") {
  std::vector<uint32_t> prev(5000), next;
  for (size_t i = 0; i < prev.size(); ++i) prev[i] = static_cast<uint32_t>(i * 2654435761u);
  next = prev;
  for (size_t i = 0; i < next.size(); i += 97)
    next[i] ^= 0x80000000u;  // sign flips: -0 vs +0 style changes count
  std::vector<std::byte> blob;
  DeltaStats s = encode_delta(prev.data(), next.data(), static_cast<int64_t>(prev.size()), 4, blob);
  CHECK(s.changed == 52);
  CHECK(s.form == DeltaForm::indices);
  std::vector<uint32_t> engine = prev;
  apply_delta(blob.data(), blob.size(), engine.data(), static_cast<int64_t>(engine.size()), 4, "w32");
  CHECK(engine == next);
  std::vector<uint16_t> as16(10000);
  try {
    apply_delta(blob.data(), blob.size(), as16.data(), 5000, 2, "w32");
    FAIL("accepted a 4-byte update for 2-byte elements");
  } catch (const Error& e) {
    CHECK(e.code() == MLPT_DATA_LOSS);
    CHECK_THAT(e.what(), Catch::Contains("elements of 4 bytes, the tensor's have 2"));
  }
  // The same update compared byte by byte (what a dtype of another width uses) is exact too.
  blob.clear();
  encode_delta(prev.data(), next.data(), static_cast<int64_t>(prev.size()) * 4, 1, blob);
  engine = prev;
  apply_delta(blob.data(), blob.size(), engine.data(), static_cast<int64_t>(engine.size()) * 4, 1, "w8");
  CHECK(engine == next);
  CHECK_THROWS_AS(encode_delta(prev.data(), next.data(), 10, 3, blob), Error);
}

// The sender's form: the same encoding as encode_delta, and its copy becomes the new tensor. Sizes
// that are not a multiple of the 64-byte block (a tail compared element by element) included.
TEST_CASE(
    "encoding while updating the sender's copy gives the same bytes and leaves the copy equal to the new "
    "tensor") {
  for (int64_t n : {1, 31, 32, 33, 1000, 4097}) {
    for (int64_t changed : {int64_t{0}, int64_t{1}, n / 50 + 1, n / 2, n}) {
      INFO(n << " elements, " << changed << " changed");
      Pair p = update_pair(n, changed, static_cast<uint64_t>(n * 31 + changed));
      std::vector<std::byte> reference, updated;
      const DeltaStats a = encode_bf16_delta(p.prev.data(), p.next.data(), n, reference);
      std::vector<uint16_t> base = p.prev;
      const DeltaStats b = encode_delta_and_update(base.data(), p.next.data(), n, 2, updated);
      CHECK(updated == reference);
      CHECK(a.changed == b.changed);
      CHECK(a.form == b.form);
      CHECK(base == p.next);
    }
  }
}
