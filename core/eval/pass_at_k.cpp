#include "core/eval/pass_at_k.hpp"

#include "core/error.hpp"

namespace mlpt::eval {

PassAtK pass_at_k(const std::vector<std::vector<double>>& rewards) {
  PassAtK out;
  if (rewards.empty()) throw Error(MLPT_INVALID_ARGUMENT, "pass@k over no tasks");
  out.tasks = static_cast<int>(rewards.size());
  out.k = static_cast<int>(rewards.front().size());
  if (out.k < 1) throw Error(MLPT_INVALID_ARGUMENT, "pass@k with k = 0");
  double any = 0, all = 0, sum = 0;
  for (size_t t = 0; t < rewards.size(); ++t) {
    if (static_cast<int>(rewards[t].size()) != out.k)
      throw Error(MLPT_INVALID_ARGUMENT, "task " + std::to_string(t) + " has " + std::to_string(rewards[t].size()) +
                                             " rollouts, expected " + std::to_string(out.k));
    bool some = false, every = true;
    for (double r : rewards[t]) {
      bool pass = r >= 1.0;
      some |= pass, every &= pass, sum += r;
    }
    any += some, all += every;
  }
  out.pass_at_k = any / out.tasks;
  out.pass_hat_k = all / out.tasks;
  out.pass_at_1 = sum / (static_cast<double>(out.tasks) * out.k);
  return out;
}

}  // namespace mlpt::eval
