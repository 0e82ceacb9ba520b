// Workspace over a sandbox reached through the host's binding (mlpt::sdk::BoundSandbox).
#pragma once

#include <mlpt/sdk.hpp>

#include "workspace.hpp"

namespace mlpt::openhands {

class SandboxWorkspace final : public Workspace {
 public:
  explicit SandboxWorkspace(mlpt::sdk::BoundSandbox& sandbox, size_t output_limit = 4u << 20)
      : sandbox_(sandbox), output_limit_(output_limit) {}
  ShellResult shell(const std::string& command, int64_t timeout_ms) override {
    auto r = sandbox_.exec(command, timeout_ms, {}, output_limit_);
    return ShellResult{r.exit_code, r.timed_out, std::move(r.output), r.truncated};
  }
  std::optional<std::string> read_file(const std::string& path) override {
    try {
      return sandbox_.read_file(path);
    } catch (const mlpt::sdk::Error& e) {
      if (e.code() == MLPT_NOT_FOUND) return std::nullopt;
      throw;
    }
  }
  void write_file(const std::string& path, const std::string& content, uint32_t mode) override {
    sandbox_.write_file(path, content, mode);
  }

 private:
  mlpt::sdk::BoundSandbox& sandbox_;
  size_t output_limit_;
};

}  // namespace mlpt::openhands
