// Which elements changed since the previous version a sender published: a private extension entry
// (mlpt.h, Extensions) on mlpt_transport_send_args, written by a trainer that knows which exported
// elements its optimizer step rewrote, read by a transport that sends only what changed (the
// sparse refit, plugins/transport_sparse). With it that transport no longer compares whole versions
// to find the changes: it reads a bit per element and the changed values. Every other transport
// skips the entry, as it skips any extension it does not know.
//
// The promise, per tensor i of the send with masks[i] != NULL: every element whose bit pattern
// differs from the same element of version `since_version` has its bit set (bit e % 64 of word
// masks[i][e / 64], elements counted at the tensor's dtype width). A set bit may mark an element
// that did not change (a reader that needs exact changes checks those); a clear bit is a promise.
// Bits past the tensor's last element are zero. masks[i] == NULL: unknown for that tensor.
// `since_version` is the version this sender rank sent before, with the same tensors in the same
// order; a reader whose last version from this sender is another one (a failed send, a restart)
// ignores the entry. The masks are the writer's and live as long as the send args.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlpt/transport.h"

namespace mlpt::sdk {

inline constexpr mlpt_extension_type kChangedElementsExtension =
    static_cast<mlpt_extension_type>(MLPT_EXTENSION_TYPE_PRIVATE_BASE + 0x32);

struct ChangedElementsExtension {
  mlpt_extension header;  // type kChangedElementsExtension, struct_size sizeof(this)
  uint64_t since_version;
  const uint64_t* const* masks;  // num_tensors entries, parallel to the send's tensors
  size_t num_tensors;
};

// The entry in `chain`, or NULL when there is none (or it is shorter than this struct).
inline const ChangedElementsExtension* find_changed_elements(const mlpt_extension* chain) {
  const mlpt_extension* e = mlpt_find_extension(chain, kChangedElementsExtension);
  if (!e || e->struct_size < sizeof(ChangedElementsExtension)) return nullptr;
  return reinterpret_cast<const ChangedElementsExtension*>(e);
}

// The words of a mask over `numel` elements.
inline constexpr size_t changed_mask_words(int64_t numel) {
  return numel > 0 ? static_cast<size_t>((numel + 63) / 64) : 0;
}

}  // namespace mlpt::sdk
