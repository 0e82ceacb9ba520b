// The tensor checksum computed piece by piece (StreamingXxhash64) against the one-shot sdk::xxhash64
// over every split of the same bytes, and the sender's checksum fused into the encode pass against a
// separate pass over the new weights: on every instruction-set path, at change densities from none
// to all, lengths that are not multiples of 64 or of the 64 KiB chunk, and unaligned starts; each
// such encoding applies bit for bit on every path.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "mlpt/sdk/xxhash64.hpp"
#include "sparse_delta.hpp"
#include "streaming_xxhash64.hpp"

using namespace mlpt::sparse_refit;

namespace {

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

}  // namespace

TEST_CASE("XXH64 fed in pieces equals the one-shot hash for every length and split") {
  // Published XXH64 values (seed 0) pin both implementations to the algorithm.
  CHECK(mlpt::sdk::xxhash64("", 0) == 0xEF46DB3751D8E999ULL);
  CHECK(StreamingXxhash64().digest() == 0xEF46DB3751D8E999ULL);
  StreamingXxhash64 abc;
  abc.update("ab", 2), abc.update("c", 1);
  CHECK(abc.digest() == 0x44BC2CF5AD770999ULL);

  std::mt19937_64 rng(5);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{63},
                   size_t{64}, size_t{100}, size_t{4099}, size_t{200003}})
    for (uint64_t seed : {uint64_t{0}, uint64_t{0x9E3779B97F4A7C15ULL}}) {
      const auto bytes = random_bytes(n, n + seed);
      const uint64_t expected = mlpt::sdk::xxhash64(bytes.data(), n, seed);
      for (int split = 0; split < 20; ++split) {
        INFO("length " << n << " seed " << seed << " split " << split);
        StreamingXxhash64 h(seed);
        // Pieces of random lengths, empty ones included; split 0 is one piece.
        for (size_t at = 0; at < n || (split == 0 && n == 0);) {
          const size_t piece = split == 0 ? n - at : std::min<size_t>(n - at, rng() % 97);
          h.update(bytes.data() + at, piece);
          at += piece;
          if (split == 0) break;
        }
        CHECK(h.digest() == expected);
      }
    }
}

TEST_CASE("the checksum fused into the encode equals a separate pass, on every path and density") {
  uint64_t seed = 900;
  for (SimdPath path : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512}) {
    if (!simd_path_supported(path)) continue;
    for (int width : {1, 2, 4, 8})
      // 70001 two-byte elements span three 64 KiB chunks and end mid-word.
      for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{129}, int64_t{70001}})
        for (double density : {0.0, 1e-4, 0.01, 0.5, 1.0}) {
          INFO(simd_path_name(path) << " width " << width << " numel " << numel << " density " << density);
          const size_t bytes = static_cast<size_t>(numel) * static_cast<size_t>(width);
          // Buffers one byte into their storage: no alignment assumed.
          auto prev_store = random_bytes(bytes + 1, ++seed);
          auto next_store = prev_store;
          std::mt19937_64 rng(seed);
          std::uniform_real_distribution<double> u(0, 1);
          for (int64_t i = 0; i < numel; ++i)
            if (u(rng) < density) next_store[1 + static_cast<size_t>(i * width)] ^= 0x01;
          const unsigned char* next = next_store.data() + 1;
          std::vector<unsigned char> base(prev_store.begin() + 1, prev_store.end());

          std::vector<std::byte> plain, fused;
          encode_delta(prev_store.data() + 1, next, numel, width, plain, path);
          uint64_t checksum = 0;
          encode_delta_and_update(base.data(), next, numel, width, fused, path, &checksum);
          CHECK(checksum == mlpt::sdk::xxhash64(next, bytes));
          CHECK(fused == plain);  // hashing changes nothing of the encoding
          CHECK(std::memcmp(base.data(), next, bytes) == 0);
          // And the encoding applies bit for bit on every path, whatever its form at this density.
          for (SimdPath applier : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512}) {
            if (!simd_path_supported(applier)) continue;
            std::vector<unsigned char> engine(prev_store.begin() + 1, prev_store.end());
            apply_delta(fused.data(), fused.size(), engine.data(), numel, width, "w", applier);
            CHECK(std::memcmp(engine.data(), next, bytes) == 0);
          }
        }
  }
}
