// Errors for plugins written in C++: throw mlpt::sdk::Error (or any std::exception) inside a
// component method; the adapters turn it into an mlpt_error* the host destroys with this plugin's
// error_api(). Every plugin shared object gets its own copy of these definitions (hidden visibility).
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "mlpt/mlpt.h"

// The plugin-side layout of the ABI's opaque error object.
struct mlpt_error {
  mlpt_error_code code;
  std::string message;
};

namespace mlpt::sdk {

class Error : public std::runtime_error {
 public:
  Error(mlpt_error_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  mlpt_error_code code() const noexcept { return code_; }

 private:
  mlpt_error_code code_;
};

inline mlpt_error* make_error(mlpt_error_code code, std::string message) noexcept {
  try {
    return new mlpt_error{code, std::move(message)};
  } catch (...) {
    static mlpt_error out_of_memory{MLPT_RESOURCE_EXHAUSTED, "out of memory creating an error"};
    return &out_of_memory;  // never freed: see error_destroy
  }
}

namespace detail {
inline bool is_static_error(const mlpt_error* e) {
  return e && e->code == MLPT_RESOURCE_EXHAUSTED && e->message == "out of memory creating an error";
}
}  // namespace detail

// This plugin's error functions, for mlpt_plugin_descriptor::errors.
inline const mlpt_error_api* error_api() {
  static const mlpt_error_api api = {
      MLPT_ERROR_API_STRUCT_SIZE,
      [](mlpt_error* e) {
        if (!detail::is_static_error(e)) delete e;
      },
      [](const mlpt_error* e) { return e->code; },
      [](const mlpt_error* e) { return mlpt_string{e->message.data(), e->message.size()}; },
  };
  return &api;
}

// Runs `body` and converts what it throws into an error object; NULL when it returns normally.
// Every ABI entry the SDK generates goes through here, so no exception crosses the C boundary.
template <class Body>
mlpt_error* guard(const char* where, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return make_error(e.code(), std::string(where) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return make_error(MLPT_RESOURCE_EXHAUSTED, std::string(where) + ": out of memory");
  } catch (const std::invalid_argument& e) {
    return make_error(MLPT_INVALID_ARGUMENT, std::string(where) + ": " + e.what());
  } catch (const std::exception& e) {
    return make_error(MLPT_INTERNAL, std::string(where) + ": " + e.what());
  } catch (...) {
    return make_error(MLPT_UNKNOWN, std::string(where) + ": unknown exception");
  }
}

}  // namespace mlpt::sdk
