// MPI's return codes as errors, for components whose ranks meet over MPI (a model-parallel group, a
// host's processes). The one place that turns an MPI code into words. Include it only where MPI is:
// it includes <mpi.h>.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

#include "mlpt/mlpt.h"

namespace mlpt::sdk {

// MPI's own text for `rc` ("MPI_ERR_TRUNCATE: message truncated", ...).
inline std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(n));
}

// Throws `E`(MLPT_UNAVAILABLE, "<what> failed: <MPI's text>") unless `rc` is MPI_SUCCESS. `E` is
// the caller's error type (the SDK's Error in a plugin, the host's own in the host).
template <class E>
void check_mpi(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return;
  throw E(MLPT_UNAVAILABLE, std::string(what) + " failed: " + mpi_error_text(rc));
}

}  // namespace mlpt::sdk
