// The using side of the sandbox component (mlpt/sandbox.h), one client for everyone who runs
// commands in sandboxes: a harness or reward inside a plugin (through the binding the host gives
// it; the SDK's BoundSandbox) and the host itself (rollouts, the conformance suite). It creates a
// sandbox from an image (or borrows one someone else owns), runs commands, reads and writes files,
// and destroys what it created.
//
// `Calls` adapts it to its user: `[[noreturn]] void fail(mlpt_error_code, std::string) const` throws
// the user's error type, and `void call(const char* function, F&& f) const` runs each call into the
// sandbox plugin (the host marks it for its crash guard; a plugin just calls).
#pragma once

#include <string>
#include <string_view>

#include "mlpt/sandbox.h"
#include "mlpt/sdk/types.hpp"

namespace mlpt::sdk {

template <class Calls>
class SandboxClient {
 public:
  // Creates (and owns) a sandbox from `image`.
  SandboxClient(const mlpt_sandbox_binding* binding, std::string_view image, int64_t memory_limit_mb = 0,
                int64_t max_processes = 0, Calls calls = {})
      : calls_(std::move(calls)), binding_(checked(binding)) {
    mlpt_sandbox_create_args a{};
    a.struct_size = MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE;
    a.runtime = binding->runtime;
    a.image = borrow(image);
    a.memory_limit_mb = memory_limit_mb;
    a.max_processes = max_processes;
    check("create", [&] { return binding_->api->create(&a); }, "creating a sandbox from " + std::string(image));
    sandbox_ = a.sandbox;
  }
  // Borrows a sandbox someone else owns (the harness's rollout sandbox).
  SandboxClient(const mlpt_sandbox_binding* binding, mlpt_sandbox* borrowed, Calls calls = {})
      : calls_(std::move(calls)), binding_(checked(binding)), sandbox_(borrowed), owned_(false) {}
  ~SandboxClient() {
    if (owned_ && sandbox_) calls_.call("destroy", [&] { binding_->api->destroy(sandbox_); });
  }
  SandboxClient(const SandboxClient&) = delete;
  SandboxClient& operator=(const SandboxClient&) = delete;

  struct Result {
    int32_t exit_code = 0;
    bool timed_out = false;
    bool truncated = false;
    std::string output;
  };
  // sandbox.h, exec: `output_limit` 0 keeps the runtime's default.
  Result exec(std::string_view command, int64_t timeout_ms, std::string_view workdir = {}, size_t output_limit = 0) {
    StringSink out;
    mlpt_sandbox_exec_args a{};
    a.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.command = borrow(command);
    a.workdir = borrow(workdir);
    a.timeout_ms = timeout_ms;
    a.output_limit = output_limit;
    a.output = out.sink();
    check("exec", [&] { return binding_->api->exec(&a); }, "exec");
    return Result{a.out_exit_code, a.out_timed_out != 0, a.out_output_truncated != 0, out.take()};
  }
  std::string read_file(std::string_view path) {
    StringSink out;
    mlpt_sandbox_read_file_args a{};
    a.struct_size = MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.path = borrow(path);
    a.content = out.sink();
    check("read_file", [&] { return binding_->api->read_file(&a); }, "read_file " + std::string(path));
    return out.take();
  }
  void write_file(std::string_view path, std::string_view content, uint32_t mode = 0644) {
    mlpt_sandbox_write_file_args a{};
    a.struct_size = MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.path = borrow(path);
    a.content = borrow(content);
    a.mode = mode;
    check("write_file", [&] { return binding_->api->write_file(&a); }, "write_file " + std::string(path));
  }
  mlpt_sandbox* handle() const { return sandbox_; }

 private:
  const mlpt_sandbox_binding* checked(const mlpt_sandbox_binding* b) const {
    if (!b || b->struct_size < MLPT_SANDBOX_BINDING_STRUCT_SIZE || !b->api || !b->errors)
      calls_.fail(MLPT_INVALID_ARGUMENT, "mlpt_sandbox_binding is NULL, too small or without its table");
    return b;
  }
  // Runs one call; its error becomes the user's, with the sandbox plugin's code and message.
  template <class F>
  void check(const char* function, F&& f, const std::string& what) const {
    mlpt_error* e = nullptr;
    calls_.call(function, [&] { e = f(); });
    if (!e) return;
    const mlpt_error_code code = binding_->errors->error_code(e);
    std::string message = to_string(binding_->errors->error_message(e));
    binding_->errors->error_destroy(e);
    calls_.fail(code, "sandbox " + what + ": " + message);
  }

  Calls calls_;
  const mlpt_sandbox_binding* binding_;
  mlpt_sandbox* sandbox_ = nullptr;
  bool owned_ = true;
};

}  // namespace mlpt::sdk
