// What the tools need from the machine they act on: a shell and whole-file reads and writes. The
// plugin implements it over the rollout's sandbox; tests implement it over a host folder, so the
// tools' exact messages are checked without a container.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mlpt::openhands {

struct ShellResult {
  int exit_code = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr merged
  bool truncated = false;  // the output passed the limit and was cut
};

class Workspace {
 public:
  virtual ~Workspace() = default;
  // Runs `command` with /bin/sh -c (working directory: the repository).
  virtual ShellResult shell(const std::string& command, int64_t timeout_ms) = 0;
  // The file's bytes, or nothing when it cannot be read.
  virtual std::optional<std::string> read_file(const std::string& path) = 0;
  // Creates or replaces the file (making parent folders) with permission bits `mode`.
  virtual void write_file(const std::string& path, const std::string& content, uint32_t mode) = 0;
};

// Single-quotes `s` for /bin/sh.
std::string shell_quote(const std::string& s);

}  // namespace mlpt::openhands
