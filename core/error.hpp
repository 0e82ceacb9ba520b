// The core's one error type: an exception carrying an ABI error code and a message that says what
// went wrong and where. Plugin errors are converted into it at the boundary (core/plugin/).
#pragma once

#include <stdexcept>
#include <string>

#include "mlpt/mlpt.h"

namespace mlpt {

class Error : public std::runtime_error {
 public:
  Error(mlpt_error_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit Error(const std::string& message) : Error(MLPT_INVALID_ARGUMENT, message) {}
  mlpt_error_code code() const noexcept { return code_; }

 private:
  mlpt_error_code code_;
};

}  // namespace mlpt
