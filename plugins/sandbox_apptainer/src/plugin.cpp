// The sandbox plugin: component kind sandbox, name "apptainer". One component, two runtimes chosen
// by the config's "runtime" ("auto": apptainer when it is on PATH, else the bwrap namespace runtime).
#include <mlpt/sdk.hpp>

#include "fault_injection.hpp"
#include "runtimes.hpp"

namespace {

class SandboxRuntimeComponent final : public mlpt::sdk::SandboxRuntime {
 public:
  explicit SandboxRuntimeComponent(std::string_view config_json)
      : config_(config_json), faults_(config_), impl_(mlpt::sandbox::make_runtime(config_)) {}
  std::string_view name() const override { return impl_->name(); }
  std::unique_ptr<mlpt::sdk::Sandbox> create(const mlpt_sandbox_create_args& args) override {
    faults_.before_create();
    return impl_->create(args);
  }

 private:
  std::string config_;
  mlpt::sandbox::FaultInjection faults_;
  std::unique_ptr<mlpt::sdk::SandboxRuntime> impl_;
};

// Both runtimes: network (bwrap --unshare-net; apptainer --net --network none) and pid namespaces,
// limits through a per-sandbox cgroup (the runtime refuses to start without one unless
// require_limits is false), writable layer removed with the sandbox.
const mlpt_sandbox_capabilities kCapabilities = {MLPT_SANDBOX_CAPABILITIES_STRUCT_SIZE,
                                                 /*isolates_network=*/1, /*isolates_pids=*/1,
                                                 /*limits_memory=*/1, /*limits_processes=*/1,
                                                 /*discards_writes=*/1};

}  // namespace

MLPT_SDK_PLUGIN("mlpt-sandbox-apptainer", "0.1.0",
                mlpt::sdk::sandbox_component<SandboxRuntimeComponent>(
                    "apptainer", "SIF images in containers: apptainer CLI, or bubblewrap namespaces", &kCapabilities))
