// bench_coordinator_simulation: sizes the trainer/engine split of a real-scale run before renting
// it. A SIMULATION: the product's scheduling policy (core/rl/) on timed stand-ins; see
// coordinator_simulation.hpp and simulation_model.hpp for what is modelled and why.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/coordinator_sim/coordinator_simulation.hpp"
#include "bench/coordinator_sim/simulation_table.hpp"
#include "core/error.hpp"

namespace sim = mlpt::coordinator_sim;

namespace {

constexpr const char* kUsage =
    "usage: bench_coordinator_simulation [--trainer-nodes 8,16,24,32] [--nodes 64] [--gpus-per-node 4]\n"
    "         [--episodes 256] [--steps 20] [--max-age 1] [--in-flight-weight-updates] [--seed 1]\n"
    "         [--markdown FILE] [--csv FILE]\n"
    "A SIMULATION of the coordinator at real scale (timed stand-ins for engines, sandboxes and trainer):\n"
    "GPU idle time, staleness and step time per placement. FILEs must not exist yet.\n";

int64_t integer(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw mlpt::Error(flag + ": expected an integer, got '" + text + "'");
  return v;
}

std::vector<int64_t> integers(const std::string& flag, const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(integer(flag, item));
  if (out.empty()) throw mlpt::Error(flag + ": expected a comma-separated list of integers");
  return out;
}

void refuse_existing(const std::string& path) {
  if (!path.empty() && std::filesystem::exists(path)) throw mlpt::Error(path + ": exists; the simulation never overwrites a result");
}

void write_new(const std::string& path, const std::string& text) {
  refuse_existing(path);
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw mlpt::Error(path + ": cannot write");
}

int run(int argc, char** argv) {
  sim::SimulationModel model;
  sim::Placement base;
  std::vector<int64_t> trainer_nodes = {8, 16, 24, 32};
  uint64_t seed = 1;
  std::string markdown_path, csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return std::fputs(kUsage, stdout), 0;
    if (flag == "--in-flight-weight-updates") {
      model.loop.in_flight_weight_updates = true;
      continue;
    }
    if (i + 1 >= argc) throw mlpt::Error(flag + ": unknown option or missing value\n" + kUsage);
    const std::string value = argv[++i];
    if (flag == "--trainer-nodes") trainer_nodes = integers(flag, value);
    else if (flag == "--nodes") base.nodes = integer(flag, value);
    else if (flag == "--gpus-per-node") base.gpus_per_node = integer(flag, value);
    else if (flag == "--episodes") base.concurrent_episodes = integer(flag, value);
    else if (flag == "--steps") model.loop.steps = integer(flag, value);
    else if (flag == "--max-age") model.loop.max_trajectory_age_steps = integer(flag, value);
    else if (flag == "--seed") seed = static_cast<uint64_t>(integer(flag, value));
    else if (flag == "--markdown") markdown_path = value;
    else if (flag == "--csv") csv_path = value;
    else throw mlpt::Error(flag + ": unknown option\n" + kUsage);
  }
  if (model.loop.steps <= 0 || model.loop.max_trajectory_age_steps < 0)
    throw mlpt::Error("--steps must be positive and --max-age not negative");
  refuse_existing(markdown_path);
  refuse_existing(csv_path);
  // Every placement is checked before any is simulated: a bad one fails the whole command at once.
  std::vector<sim::Placement> placements;
  for (int64_t t : trainer_nodes) {
    auto p = base;
    p.trainer_nodes = t;
    sim::engine_replicas(p, model);
    placements.push_back(p);
  }
  std::vector<sim::SimulationResult> results;
  for (const auto& p : placements) results.push_back(sim::simulate(model, p, seed));
  const std::string table = sim::markdown_table(results, model, seed);
  std::cout << table;
  if (!markdown_path.empty()) write_new(markdown_path, table);
  if (!csv_path.empty()) write_new(csv_path, sim::csv_table(results));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_coordinator_simulation: %s\n", e.what());
    return 2;
  }
}
