// Fault injection, for testing how a host survives sandbox failures: the config key
// "fault_injection": {"fail_every_nth_create": N} makes every N-th sandbox creation of the runtime
// fail with UNAVAILABLE (a real failure of `create`, as when the image store or cgroups break). The
// key is taken out of the config before the runtime reads it; absent, nothing changes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <mlpt/sdk.hpp>
#include <nlohmann/json.hpp>

namespace mlpt::sandbox {

class FaultInjection {
 public:
  // Removes "fault_injection" from `config_json` (returned through it) and reads it.
  explicit FaultInjection(std::string& config_json) {
    if (config_json.find("fault_injection") == std::string::npos) return;
    nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
    if (!j.is_object() || !j.contains("fault_injection")) return;
    const nlohmann::json f = j["fault_injection"];
    if (!f.is_object() || f.size() != 1 || !f.contains("fail_every_nth_create") || !f["fail_every_nth_create"].is_number_integer() ||
        f["fail_every_nth_create"].get<int64_t>() < 1)
      throw mlpt::sdk::Error(MLPT_INVALID_ARGUMENT, "sandbox config: \"fault_injection\" must be {\"fail_every_nth_create\": N >= 1}, got " + f.dump());
    every_ = f["fail_every_nth_create"].get<int64_t>();
    j.erase("fault_injection");
    config_json = j.dump();
  }

  // Throws for the creations chosen to fail.
  void before_create() {
    if (every_ == 0) return;
    const int64_t n = ++creates_;
    if (n % every_ == 0)
      throw mlpt::sdk::Error(MLPT_UNAVAILABLE, "sandbox create #" + std::to_string(n) +
                                                   " failed by fault injection (fault_injection.fail_every_nth_create = " +
                                                   std::to_string(every_) + ")");
  }

 private:
  int64_t every_ = 0;
  std::atomic<int64_t> creates_{0};
};

}  // namespace mlpt::sandbox
