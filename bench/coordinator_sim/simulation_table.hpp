// The simulation's results as a markdown table (one row per placement) and as CSV, both headed as
// a simulation so nobody mistakes them for measurements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/coordinator_sim/coordinator_simulation.hpp"

namespace mlpt::coordinator_sim {

std::string markdown_table(const std::vector<SimulationResult>& results, const SimulationModel& model, uint64_t seed);
std::string csv_table(const std::vector<SimulationResult>& results);

}  // namespace mlpt::coordinator_sim
