// init_weights draws a model's tensors in parallel blocks (each block starting its tensor's stream
// at its first draw): the values must be those of one sequential pass over each tensor's stream,
// whatever the number of workers. The reference here is that sequential pass, written from the
// definition (SplitMix64 seeded by seed XOR FNV-1a(name), Box-Muller per pair of uniforms).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>

#include "model/config.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref;

namespace {

struct SequentialStream {
  uint64_t s;
  SequentialStream(uint64_t seed, const std::string& name) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    s = seed ^ h;
    next();
  }
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("init_weights: parallel blocks draw each tensor's sequential stream, for any number of workers") {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  const Weights<float> one = init_weights<float>(c, 5, 1);
  const double bound = 1.0 / std::sqrt(double(c.conv_kernel));
  size_t checked_normal = 0, checked_uniform = 0;
  for (size_t i = 0; i < one.layout.tensors.size(); ++i) {
    const TensorSpec& t = one.layout.tensors[i];
    SequentialStream rng(5, t.name);
    std::vector<float> expect(one.values[i].size());
    for (float& x : expect) {
      switch (t.init) {
        case Init::normal:
          x = static_cast<float>(c.initializer_range * rng.normal());
          break;
        case Init::zeros:
          x = 0.f;
          break;
        case Init::ones:
          x = 1.f;
          break;
        case Init::a_log:
          x = static_cast<float>(std::log(0.01 + (16.0 - 0.01) * rng.uniform()));
          break;
        case Init::conv:
          x = static_cast<float>(bound * (2.0 * rng.uniform() - 1.0));
          break;
      }
    }
    INFO("tensor " << t.name << " (" << expect.size() << " values)");
    CHECK(same_bits(one.values[i], expect));
    if (t.init == Init::normal && expect.size() > (size_t(1) << 16)) ++checked_normal;  // spans blocks
    if (t.init == Init::a_log || t.init == Init::conv) ++checked_uniform;
  }
  CHECK(checked_normal > 0);  // the tiny model has tensors longer than a block
  CHECK(checked_uniform > 0);
  for (int threads : {2, 3, 8}) {
    const Weights<float> many = init_weights<float>(c, 5, threads);
    for (size_t i = 0; i < one.values.size(); ++i) CHECK(same_bits(many.values[i], one.values[i]));
  }
}
