// The sparse refit's inner loops on every instruction-set path this CPU runs (scalar always): the
// change mask, the gathered values and the scattered update against a plain element-by-element
// reference, for every element width, lengths around the vector widths and unaligned starts, on
// data full of the bit patterns a float compare would get wrong (NaN payloads, -0.0, denormals).
// Encodings made on one path are byte for byte those of every other, and apply on any path.
#include "delta_kernels.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "sparse_delta.hpp"

using namespace mlpt::sparse_refit;

namespace {

const SimdPath kPaths[] = {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512};

std::vector<SimdPath> runnable_paths() {
  std::vector<SimdPath> out;
  for (SimdPath p : kPaths)
    if (simd_path_supported(p)) out.push_back(p);
  return out;
}

// Element patterns a value compare would merge or split: +0/-0, two NaNs with other payloads, a
// denormal and its neighbour, for 2-, 4- and 8-byte floats; other widths take random bits.
uint64_t tricky(int width, uint64_t pick) {
  static const uint64_t bf16[] = {0x0000, 0x8000, 0x7fc1, 0x7fc2, 0xffc1, 0x0001, 0x0002, 0x7f80};
  static const uint64_t f32[] = {0x00000000, 0x80000000, 0x7fc00001, 0x7fc00002,
                                 0xffc00001, 0x00000001, 0x00000002, 0x7f800000};
  static const uint64_t f64[] = {
      0, 0x8000000000000000, 0x7ff8000000000001, 0x7ff8000000000002, 0xfff8000000000001, 1,
      2, 0x7ff0000000000000};
  if (width == 2) return bf16[pick % 8];
  if (width == 4) return f32[pick % 8];
  if (width == 8) return f64[pick % 8];
  return pick & 0xff;
}

struct Case {
  std::vector<uint8_t> a_store, b_store;  // with room for an unaligned start
  uint8_t *a, *b;
  int64_t numel;
  int width;
};

// `numel` elements starting `offset` bytes into their buffers; b differs from a in about `fraction`
// of them, and often only in a NaN payload or the sign of zero.
Case make_case(int64_t numel, int width, size_t offset, double fraction, uint64_t seed) {
  Case c;
  c.numel = numel, c.width = width;
  const size_t bytes = static_cast<size_t>(numel) * static_cast<size_t>(width);
  c.a_store.assign(bytes + offset + 1, 0), c.b_store.assign(bytes + offset + 1, 0);
  c.a = c.a_store.data() + offset, c.b = c.b_store.data() + offset;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t i = 0; i < numel; ++i) {
    const uint64_t x = rng() % 2 ? tricky(width, rng()) : rng();
    std::memcpy(c.a + i * width, &x, static_cast<size_t>(width));
    uint64_t y = x;
    if (u(rng) < fraction) y = rng() % 2 ? tricky(width, rng()) : x ^ (uint64_t{1} << (rng() % (8 * width)));
    std::memcpy(c.b + i * width, &y, static_cast<size_t>(width));
  }
  return c;
}

std::vector<int64_t> reference_changes(const Case& c) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c.numel; ++i)
    if (std::memcmp(c.a + i * c.width, c.b + i * c.width, static_cast<size_t>(c.width)) != 0)
      out.push_back(i);
  return out;
}

}  // namespace

TEST_CASE("the best path is one this CPU runs, and the scalar path is always there") {
  CHECK(simd_path_supported(SimdPath::scalar));
  CHECK(simd_path_supported(best_simd_path()));
  INFO("best path here: " << simd_path_name(best_simd_path()));
  for (SimdPath p : kPaths) {
    if (simd_path_supported(p)) continue;
    // A path this CPU lacks is refused, never run.
    std::vector<uint64_t> mask(1);
    uint16_t x = 0;
    CHECK_THROWS_AS(diff_mask(p, &x, &x, 1, 2, mask.data()), mlpt::sdk::Error);
  }
}

TEST_CASE("every path finds, gathers and scatters exactly the changed bit patterns") {
  const double fractions[] = {0.0, 0.01, 0.3, 1.0};
  uint64_t seed = 1;
  for (SimdPath path : runnable_paths())
    for (int width : {1, 2, 4, 8})
      for (int64_t numel : {0, 1, 31, 63, 64, 65, 127, 128, 200, 1001, 4099})
        for (size_t offset : {0, 1, 3, 8})
          for (double fraction : fractions) {
            INFO(simd_path_name(path) << " width " << width << " numel " << numel << " offset " << offset
                                      << " fraction " << fraction);
            Case c = make_case(numel, width, offset, fraction, ++seed);
            const std::vector<int64_t> changes = reference_changes(c);
            std::vector<uint64_t> mask(static_cast<size_t>((numel + 63) / 64) + 1, ~uint64_t{0});
            const int64_t count = diff_mask(path, c.a, c.b, numel, width, mask.data());
            REQUIRE(count == static_cast<int64_t>(changes.size()));
            std::vector<int64_t> marked;
            for (int64_t i = 0; i < (numel + 63) / 64 * 64; ++i)
              if (mask[static_cast<size_t>(i / 64)] >> (i % 64) & 1) marked.push_back(i);
            REQUIRE(marked == changes);          // bits past numel are 0
            CHECK(mask.back() == ~uint64_t{0});  // nothing written past the mask's words

            // Gather: the changed values of b in order, and a updated to b; one guard byte after.
            const size_t w = static_cast<size_t>(width);
            std::vector<std::byte> values(changes.size() * w + 1, std::byte{0x5a});
            std::vector<uint8_t> updated(c.a, c.a + numel * width);
            gather_changed(path, mask.data(), numel, width, c.b, values.data(), updated.data());
            for (size_t j = 0; j < changes.size(); ++j)
              REQUIRE(std::memcmp(values.data() + j * w, c.b + changes[j] * width, w) == 0);
            CHECK(values.back() == std::byte{0x5a});
            CHECK(std::memcmp(updated.data(), c.b, updated.size()) == 0);

            // Scatter into a copy of a (at an unaligned start too): it becomes b.
            std::vector<uint8_t> target_store(numel * width + offset + 1, 0xee);
            uint8_t* target = target_store.data() + offset;
            std::memcpy(target, c.a, static_cast<size_t>(numel * width));
            scatter_changed(path, mask.data(), numel, width, values.data(), target);
            CHECK(std::memcmp(target, c.b, static_cast<size_t>(numel * width)) == 0);
            CHECK(target_store.back() == 0xee);
          }
}

TEST_CASE("an encoding is the same bytes on every path and applies on every path") {
  const std::vector<SimdPath> paths = runnable_paths();
  uint64_t seed = 100;
  for (int width : {1, 2, 4, 8})
    for (int64_t numel : {1, 65, 3001, 20000})
      for (double fraction : {0.001, 0.02, 0.4, 1.0}) {
        INFO("width " << width << " numel " << numel << " fraction " << fraction);
        Case c = make_case(numel, width, 1, fraction, ++seed);
        std::vector<std::byte> first;
        for (SimdPath encoder : paths) {
          INFO("encoded on " << simd_path_name(encoder));
          std::vector<std::byte> blob;
          encode_delta(c.a, c.b, numel, width, blob, encoder);
          if (first.empty()) first = blob;
          CHECK(blob == first);
          for (SimdPath applier : paths) {
            INFO("applied on " << simd_path_name(applier));
            std::vector<uint8_t> engine(c.a, c.a + numel * width);
            apply_delta(blob.data(), blob.size(), engine.data(), numel, width, "w", applier);
            CHECK(std::memcmp(engine.data(), c.b, engine.size()) == 0);
          }
          // Encoding with the update brings the sender's copy to b as well.
          std::vector<uint8_t> base(c.a, c.a + numel * width);
          std::vector<std::byte> again;
          encode_delta_and_update(base.data(), c.b, numel, width, again, encoder);
          CHECK(again == first);
          CHECK(std::memcmp(base.data(), c.b, base.size()) == 0);
        }
      }
}

TEST_CASE("a bitmap whose padding bits are set still marks only the tensor's elements") {
  // 70 elements: the bitmap's last byte holds 6 bits of the tensor and 2 of padding.
  Case c = make_case(70, 2, 0, 0.5, 7);
  std::vector<std::byte> blob;
  DeltaStats s = encode_delta(c.a, c.b, 70, 2, blob);
  REQUIRE(s.form == DeltaForm::bitmap);
  blob[32 + 8] |= std::byte{0xc0};
  std::vector<uint8_t> engine(c.a, c.a + 140);
  apply_delta(blob.data(), blob.size(), engine.data(), 70, 2, "w");
  CHECK(std::memcmp(engine.data(), c.b, 140) == 0);
}
