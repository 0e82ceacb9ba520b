#include "core/run/checkpoint.hpp"

#include <fstream>

#include "core/error.hpp"

namespace mlpt::run {

void save_checkpoint(const std::filesystem::path& dir, int64_t step, int64_t samples,
                     const std::function<void(const std::filesystem::path&)>& save_trainer_state,
                     const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals) {
  const auto final_dir = dir / ("step_" + std::to_string(step));
  const auto tmp = dir / ("step_" + std::to_string(step) + ".partial");
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp / "trainer");
  save_trainer_state(tmp / "trainer");
  nlohmann::json state = {{"step", step}, {"samples", samples}, {"steps", nlohmann::json::array()}, {"evals", nlohmann::json::array()}};
  for (const auto& s : steps) state["steps"].push_back(step_record_json(s));
  for (const auto& e : evals) state["evals"].push_back(eval_record_json(e));
  {
    std::ofstream out(tmp / "loop_state.json");
    out << state.dump(1);
    if (!out.flush()) throw Error(MLPT_DATA_LOSS, (tmp / "loop_state.json").string() + ": write failed");
  }
  std::filesystem::remove_all(final_dir);
  std::filesystem::rename(tmp, final_dir);
}

std::optional<CheckpointState> latest_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  std::optional<CheckpointState> best;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find(".partial") != std::string::npos) continue;
    std::ifstream in(e.path() / "loop_state.json");
    if (!in) continue;
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    CheckpointState s;
    s.step = j["step"], s.samples = j["samples"];
    s.trainer_dir = e.path() / "trainer";
    for (const auto& r : j["steps"]) s.steps.push_back(step_record_from_json(r));
    for (const auto& r : j["evals"]) s.evals.push_back(eval_record_from_json(r));
    if (!best || s.step > best->step) best = std::move(s);
  }
  return best;
}

}  // namespace mlpt::run
