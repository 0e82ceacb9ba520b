// C++ adapter for the sandbox component (mlpt/sandbox.h): a runtime class (constructor taking the
// config JSON, `name()`, `create(args)` returning a new Sandbox) and a Sandbox class.
#pragma once

#include <memory>

#include "mlpt/sandbox.h"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/sandbox_client.hpp"

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

namespace detail {
// How a plugin's sandbox client reports: mlpt::sdk::Error, calls made as they are.
struct PluginSandboxCalls {
  [[noreturn]] void fail(mlpt_error_code code, std::string message) const { throw Error(code, std::move(message)); }
  template <class F>
  void call(const char*, F&& f) const {
    f();
  }
};
}  // namespace detail

// The using side (a harness or reward inside a plugin): the host-provided sandbox component through
// its binding, its errors as mlpt::sdk::Error (sandbox_client.hpp, the client the host uses too).
using BoundSandbox = SandboxClient<detail::PluginSandboxCalls>;

}  // namespace mlpt::sdk
