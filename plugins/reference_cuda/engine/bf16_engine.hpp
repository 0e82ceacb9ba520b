// The engine component "qwen35_bf16": the device backend (engine/device_backend.hpp, qwen35_cuda's
// engine code) on the host platform, bf16 storage emulated by backends/cpu/bf16_ops. It generates
// what qwen35_cuda generates, to fp32 summation order, on any CPU: with the "qwen35_bf16" trainer
// it runs the GPU components' whole path (the letters run, refits, engine groups) in CI.
// Settings: the device backend's.
#pragma once

#include <string_view>

#include "engine/engine.hpp"

namespace mlpt::ref {

class Bf16Engine final : public ReferenceEngine {
 public:
  explicit Bf16Engine(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref
