// Inputs and the expected words for the ops that write a tensor and mark what changed
// (ops/ops.hpp, to_bf16_marking and copy_marking), for every backend's test: the expected marks
// come from the tensor's bits before and after the op, never from the op's own comparison.
//
// The inputs cycle through the cases a value comparison would get wrong: the same value (no
// change), another value, −0.0 over +0.0 (equal as numbers, other bits), a NaN over a NaN of
// another payload (a change), a NaN over the same NaN (no change where the backend keeps the
// payload), and a value that differs in fp32 but rounds to the same bf16 (no change in bf16).
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/bf16.hpp"

namespace change_marks {

inline float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}
inline uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
inline uint16_t bits_of(mlpt::ref::bf16 b) {
  return b.bits;
}

// A tensor's stored values before the op (`before`) and the fp32 values written over them (`x`).
template <class T>
struct Case {
  std::vector<T> before;
  std::vector<float> x;
};

// n elements of bf16 storage; `seed` varies the ordinary values.
inline Case<mlpt::ref::bf16> bf16_case(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  Case<mlpt::ref::bf16> c;
  for (int64_t i = 0; i < n; ++i) {
    const mlpt::ref::bf16 old = mlpt::ref::to_bf16(d(rng));
    const float wide = mlpt::ref::to_float(old);
    switch ((i + int64_t(seed)) % 6) {
      case 0:
        c.before.push_back(old), c.x.push_back(wide);
        break;
      case 1:
        c.before.push_back(old), c.x.push_back(wide + 0.5f);
        break;
      case 2:
        c.before.push_back(mlpt::ref::bf16{0x0000}), c.x.push_back(-0.0f);
        break;
      case 3:
        c.before.push_back(mlpt::ref::bf16{0x7fc1}), c.x.push_back(from_bits(0x7fc20000u));
        break;
      case 4:
        c.before.push_back(mlpt::ref::bf16{0x7fc1}), c.x.push_back(from_bits(0x7fc10000u));
        break;
      default:
        c.before.push_back(old), c.x.push_back(wide * (1.f + 1.f / 4096));
        break;  // rounds back
    }
  }
  return c;
}

// n elements of fp32 storage.
inline Case<float> fp32_case(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  Case<float> c;
  for (int64_t i = 0; i < n; ++i) {
    const float old = d(rng);
    switch ((i + int64_t(seed)) % 6) {
      case 0:
        c.before.push_back(old), c.x.push_back(old);
        break;
      case 1:
        c.before.push_back(old), c.x.push_back(old + 0.5f);
        break;
      case 2:
        c.before.push_back(0.0f), c.x.push_back(-0.0f);
        break;
      case 3:
        c.before.push_back(from_bits(0x7fc00001u)), c.x.push_back(from_bits(0x7fc00002u));
        break;
      case 4:
        c.before.push_back(from_bits(0x7fc00001u)), c.x.push_back(from_bits(0x7fc00001u));
        break;
      default:
        c.before.push_back(old), c.x.push_back(old * (1.f + 1.f / 4096));
        break;
    }
  }
  return c;
}

// `prior` with bit i % 32 of word i / 32 set wherever element i's bits differ between `before` and
// `after`.
template <class T>
std::vector<uint32_t> expected(const std::vector<T>& before, const std::vector<T>& after,
                               std::vector<uint32_t> prior) {
  for (size_t i = 0; i < before.size(); ++i)
    if (bits_of(before[i]) != bits_of(after[i])) prior[i / 32] |= uint32_t{1} << (i % 32);
  return prior;
}

// The words of n elements.
inline size_t words(int64_t n) {
  return size_t((n + 31) / 32);
}

}  // namespace change_marks
