// `mlpt rollout show RUN_DIR [--id N | --worst | --best] [--kind train|validation] [--json]`: one
// recorded rollout of a run as a readable transcript (or its JSON record). --worst / --best pick
// the lowest / highest reward (the first such); without a choice, the last rollout.
#include <algorithm>
#include <iostream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/run/rollout_record.hpp"

namespace mlpt::cli {
namespace {

int rollout_show(const std::vector<std::string>& argv) {
  Args args(argv, {"--worst", "--best", "--json"}, {"--id", "--kind"});
  const std::filesystem::path dir = args.positional(0, "RUN_DIR");
  if (int(args.option("--id").has_value()) + int(args.flag("--worst")) + int(args.flag("--best")) > 1)
    throw Error("choose one of --id N, --worst, --best");
  auto all = run::read_rollouts(dir);
  std::vector<nlohmann::json> records;
  const auto kind = args.option("--kind");
  if (kind && *kind != "train" && *kind != "validation") throw Error("--kind must be train or validation, got " + *kind);
  for (auto& r : all)
    if (!kind || r.value("kind", "") == *kind) records.push_back(std::move(r));
  const std::string where = (dir / run::kRolloutsFile).string();
  if (records.empty()) throw Error(MLPT_NOT_FOUND, where + ": no " + (kind ? *kind + " " : std::string()) + "rollouts recorded");
  const nlohmann::json* chosen = &records.back();
  if (auto id = args.option("--id")) {
    chosen = nullptr;
    for (const auto& r : records)
      if (std::to_string(r.value("id", int64_t(-1))) == *id) chosen = &r;
    if (!chosen)
      throw Error(MLPT_NOT_FOUND, where + ": no rollout with id " + *id + " (ids 0.." + std::to_string(all.size() - 1) + ")");
  } else if (args.flag("--worst") || args.flag("--best")) {
    auto by_reward = [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["reward"].value("value", 0.0) < b["reward"].value("value", 0.0);
    };
    // min_element and max_element both return the first of equals.
    chosen = &*(args.flag("--best") ? std::max_element(records.begin(), records.end(), by_reward)
                                     : std::min_element(records.begin(), records.end(), by_reward));
  }
  if (args.flag("--json")) std::cout << chosen->dump(2) << "\n";
  else std::cout << run::format_transcript(*chosen);
  return 0;
}

}  // namespace

MLPT_COMMAND("rollout show", "RUN_DIR [--id N | --worst | --best] [--kind train|validation] [--json]",
             "one recorded rollout of a run as a readable transcript", &rollout_show);

}  // namespace mlpt::cli
