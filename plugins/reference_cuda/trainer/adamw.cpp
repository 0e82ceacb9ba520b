#include "trainer/adamw.hpp"

#include <cmath>

namespace mlpt::ref {

void adamw_update(Weights<float>& w, const Weights<float>& g, Weights<float>& m, Weights<float>& v, int64_t step,
                  const AdamWSettings& s, double scale, const std::vector<bool>& trainable, const OptimizerShards& shards) {
  const double c1 = 1.0 - std::pow(s.beta1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(s.beta2, static_cast<double>(step));
  for (size_t i = 0; i < w.values.size(); ++i) {
    if (!trainable[i]) continue;
    const int64_t numel = static_cast<int64_t>(w.values[i].size()), first = shards.of(i).first(numel);
    float* p = w.values[i].data() + first;  // this replica's range: m and v hold just it
    float* mi = m.values[i].data();
    float* vi = v.values[i].data();
    const float* gi = g.values[i].data() + first;
    for (size_t j = 0; j < static_cast<size_t>(shards.of(i).count(numel)); ++j) {
      double gr = static_cast<double>(gi[j]) * scale;
      double mj = s.beta1 * mi[j] + (1.0 - s.beta1) * gr;
      double vj = s.beta2 * vi[j] + (1.0 - s.beta2) * gr * gr;
      mi[j] = static_cast<float>(mj);
      vi[j] = static_cast<float>(vj);
      double update = (mj / c1) / (std::sqrt(vj / c2) + s.eps) + s.weight_decay * p[j];
      p[j] = static_cast<float>(p[j] - s.lr * update);
    }
  }
}

}  // namespace mlpt::ref
