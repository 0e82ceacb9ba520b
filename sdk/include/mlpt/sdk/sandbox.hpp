// C++ adapter for the sandbox component (mlpt/sandbox.h): a runtime class (constructor taking the
// config JSON, `name()`, `create(args)` returning a new Sandbox) and a Sandbox class.
#pragma once

#include <memory>

#include "mlpt/sandbox.h"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::sdk {

class Sandbox {
 public:
  virtual ~Sandbox() = default;  // kills what runs inside and removes every trace
  virtual void exec(mlpt_sandbox_exec_args& args) = 0;
  virtual void read_file(std::string_view path, const mlpt_sink* content) = 0;
  virtual void write_file(std::string_view path, std::string_view content, uint32_t mode) = 0;
};

class SandboxRuntime {
 public:
  virtual ~SandboxRuntime() = default;
  virtual std::string_view name() const = 0;  // lives as long as the runtime
  virtual std::unique_ptr<Sandbox> create(const mlpt_sandbox_create_args& args) = 0;  // thread-safe
};

namespace detail {
inline Sandbox* as_sandbox(mlpt_sandbox* s) {
  if (!s) throw Error(MLPT_INVALID_ARGUMENT, "sandbox handle is NULL");
  return reinterpret_cast<Sandbox*>(s);
}
}  // namespace detail

template <class R>
const mlpt_sandbox_api* sandbox_api() {
  using detail::as_sandbox;
  static const mlpt_sandbox_api api = {
      MLPT_SANDBOX_API_STRUCT_SIZE,
      [](mlpt_sandbox_runtime_create_args* a) {
        return guard("sandbox.runtime_create", [&] {
          require_struct(a, MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE_1_0,
                         "mlpt_sandbox_runtime_create_args");
          auto* runtime = static_cast<SandboxRuntime*>(new R(view(a->config_json)));
          a->runtime = reinterpret_cast<mlpt_sandbox_runtime*>(runtime);
          a->out_runtime_name = borrow(runtime->name());
        });
      },
      [](mlpt_sandbox_runtime* r) { delete reinterpret_cast<SandboxRuntime*>(r); },
      [](mlpt_sandbox_create_args* a) {
        return guard("sandbox.create", [&] {
          require_struct(a, MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_sandbox_create_args");
          if (!a->runtime) throw Error(MLPT_INVALID_ARGUMENT, "runtime handle is NULL");
          auto sandbox = reinterpret_cast<SandboxRuntime*>(a->runtime)->create(*a);
          a->sandbox = reinterpret_cast<mlpt_sandbox*>(sandbox.release());
        });
      },
      [](mlpt_sandbox* s) { delete reinterpret_cast<Sandbox*>(s); },
      [](mlpt_sandbox_exec_args* a) {
        return guard("sandbox.exec", [&] {
          require_struct(a, MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE_1_0, "mlpt_sandbox_exec_args");
          as_sandbox(a->sandbox)->exec(*a);
        });
      },
      [](mlpt_sandbox_read_file_args* a) {
        return guard("sandbox.read_file", [&] {
          require_struct(a, MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE_1_0, "mlpt_sandbox_read_file_args");
          as_sandbox(a->sandbox)->read_file(view(a->path), a->content);
        });
      },
      [](mlpt_sandbox_write_file_args* a) {
        return guard("sandbox.write_file", [&] {
          require_struct(a, MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE_1_0, "mlpt_sandbox_write_file_args");
          as_sandbox(a->sandbox)->write_file(view(a->path), view(a->content), a->mode);
        });
      },
      nullptr,  // extension_start
  };
  return &api;
}

template <class R>
ComponentSpec sandbox_component(std::string_view name, std::string_view description,
                                 const mlpt_sandbox_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_SANDBOX, name, description, sandbox_api<R>(), caps);
}

// The using side (a harness or reward inside a plugin): calls the host-provided sandbox component
// through its binding and turns its errors into mlpt::sdk::Error. Owns one sandbox.
class BoundSandbox {
 public:
  BoundSandbox(const mlpt_sandbox_binding* binding, std::string_view image, int64_t memory_limit_mb = 0,
               int64_t max_processes = 0)
      : binding_(binding) {
    require_struct(binding, MLPT_SANDBOX_BINDING_STRUCT_SIZE, "mlpt_sandbox_binding");
    mlpt_sandbox_create_args a{};
    a.struct_size = MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE;
    a.runtime = binding->runtime;
    a.image = borrow(image);
    a.memory_limit_mb = memory_limit_mb;
    a.max_processes = max_processes;
    check(binding->api->create(&a), "creating a sandbox from " + std::string(image));
    sandbox_ = a.sandbox;
  }
  // Borrow a sandbox someone else owns (the harness's rollout sandbox).
  BoundSandbox(const mlpt_sandbox_binding* binding, mlpt_sandbox* borrowed)
      : binding_(binding), sandbox_(borrowed), owned_(false) {
    require_struct(binding, MLPT_SANDBOX_BINDING_STRUCT_SIZE, "mlpt_sandbox_binding");
  }
  ~BoundSandbox() {
    if (owned_ && sandbox_) binding_->api->destroy(sandbox_);
  }
  BoundSandbox(const BoundSandbox&) = delete;
  BoundSandbox& operator=(const BoundSandbox&) = delete;

  struct Result {
    int32_t exit_code = 0;
    bool timed_out = false;
    bool truncated = false;
    std::string output;
  };
  Result exec(std::string_view command, int64_t timeout_ms, std::string_view workdir = {},
              size_t output_limit = 0) {
    StringSink out;
    mlpt_sandbox_exec_args a{};
    a.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.command = borrow(command);
    a.workdir = borrow(workdir);
    a.timeout_ms = timeout_ms;
    a.output_limit = output_limit;
    a.output = out.sink();
    check(binding_->api->exec(&a), "exec");
    return Result{a.out_exit_code, a.out_timed_out != 0, a.out_output_truncated != 0, out.take()};
  }
  std::string read_file(std::string_view path) {
    StringSink out;
    mlpt_sandbox_read_file_args a{};
    a.struct_size = MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.path = borrow(path);
    a.content = out.sink();
    check(binding_->api->read_file(&a), "read_file " + std::string(path));
    return out.take();
  }
  void write_file(std::string_view path, std::string_view content, uint32_t mode = 0644) {
    mlpt_sandbox_write_file_args a{};
    a.struct_size = MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE;
    a.sandbox = sandbox_;
    a.path = borrow(path);
    a.content = borrow(content);
    a.mode = mode;
    check(binding_->api->write_file(&a), "write_file " + std::string(path));
  }
  mlpt_sandbox* handle() const { return sandbox_; }

 private:
  void check(mlpt_error* e, const std::string& what) {
    if (!e) return;
    mlpt_error_code code = binding_->errors->error_code(e);
    std::string message = to_string(binding_->errors->error_message(e));
    binding_->errors->error_destroy(e);
    throw Error(code, "sandbox " + what + ": " + message);
  }
  const mlpt_sandbox_binding* binding_;
  mlpt_sandbox* sandbox_ = nullptr;
  bool owned_ = true;
};

}  // namespace mlpt::sdk
