// A real `mlpt serve` on loopback for tests: started on a free port (the kernel picks it; the server
// writes it to a file), stopped with SIGTERM when the object goes, or killed on purpose.
// Tests that include it define what tests/e2e/mlpt_command.hpp needs.
#pragma once

#include "tests/e2e/mlpt_command.hpp"

namespace mlpt::e2e {

class ServedEngine {
 public:
  // Serves the engine of `config` (its [components.engine]); output in `dir`/serve.log.
  ServedEngine(const fs::path& config, const fs::path& dir) {
    fs::create_directories(dir);
    const fs::path port_file = dir / "port";
    fs::remove(port_file);
    process_ = spawn_mlpt({"serve", config.string(), "--port", "0", "--port-file", port_file.string()}, dir / "serve.log");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(port_file)) {
      int status = 0;
      if (waitpid(process_.pid, &status, WNOHANG) == process_.pid) {
        process_.pid = -1;
        FAIL("mlpt serve exited before listening:\n" << read_text(dir / "serve.log"));
      }
      if (std::chrono::steady_clock::now() > until) FAIL("mlpt serve did not listen within 60 s:\n" << read_text(dir / "serve.log"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    port_ = std::stoi(read_text(port_file));
  }
  ~ServedEngine() { stop(); }
  ServedEngine(const ServedEngine&) = delete;
  ServedEngine& operator=(const ServedEngine&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // SIGTERM and wait; returns the exit code (-1 if it had to be killed).
  int stop() {
    if (process_.pid < 0) return 0;
    kill(process_.pid, SIGTERM);
    const int code = process_.wait(30);
    process_.pid = -1;
    return code;
  }
  // SIGKILL: the server dies as a crashed one would, mid-request.
  void kill_now() {
    if (process_.pid < 0) return;
    kill(process_.pid, SIGKILL);
    process_.wait(30);
    process_.pid = -1;
  }
  std::string log() const { return process_.text(); }

 private:
  Process process_;
  int port_ = 0;
};

}  // namespace mlpt::e2e
