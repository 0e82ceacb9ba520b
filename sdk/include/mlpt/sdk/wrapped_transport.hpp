// A transport that wraps another (the sparse refit, plugins/transport_sparse): its endpoints change
// what a version looks like on the way and move it through an inner endpoint of the run's own
// transport. The host binds the two: it creates the inner endpoint first and passes its binding to
// the wrapper's create as a private extension entry (mlpt.h, Extensions) on
// mlpt_transport_create_args. A wrapper created without one refuses with MLPT_FAILED_PRECONDITION.
//
// Ownership, unlike a binding passed to publish_weights or fetch_weights: the wrapper keeps the inner
// binding (and the report sink) for its whole life; both are the host's, and the host destroys the
// wrapper before the inner endpoint. The wrapper calls the inner endpoint only from inside its own
// calls (one thread at a time, as transport.h asks of every endpoint).
//
// The report: after each version a wrapping sender has sent, it calls `report` (when set) on the
// sending thread with what the version cost, so the run's metrics show it whichever component
// called send (the host, or a trainer publishing through the wrapper's binding).
#pragma once

#include <cstdint>

#include "mlpt/transport.h"

namespace mlpt::sdk {

inline constexpr mlpt_extension_type kWrappedTransportExtension =
    static_cast<mlpt_extension_type>(MLPT_EXTENSION_TYPE_PRIVATE_BASE + 0x31);

struct WrappedTransportReport {
  uint64_t version;
  int32_t full;              // nonzero: the weights themselves went; zero: only what changed
  int32_t whole_by_rates;    // nonzero: full because the measured rates said it was quicker
  uint64_t bytes;            // handed to the inner endpoint, everything included
  uint64_t dense_bytes;      // the weights' own size: what sending them whole moves
  int64_t elements;          // as compared
  int64_t changed;           // elements that differ from the previous version (0 when full)
  int32_t from_change_list;  // nonzero: a delta of the elements the trainer marked
                             // (mlpt/sdk/changed_elements.hpp)
};

struct WrappedTransportExtension {
  mlpt_extension header;  // type kWrappedTransportExtension, struct_size sizeof(this)
  mlpt_transport_binding inner;
  void* report_ctx;
  void (*report)(void* ctx, const WrappedTransportReport* report);  // NULL: no reports
};

// The entry in `chain`, or NULL when there is none (or it is shorter than this struct).
inline const WrappedTransportExtension* find_wrapped_transport(const mlpt_extension* chain) {
  const mlpt_extension* e = mlpt_find_extension(chain, kWrappedTransportExtension);
  if (!e || e->struct_size < sizeof(WrappedTransportExtension)) return nullptr;
  return reinterpret_cast<const WrappedTransportExtension*>(e);
}

}  // namespace mlpt::sdk
