/* Compiled with abi/snapshots/1.1 ahead of abi/include on the include path: the snapshot's
 * transport.h is the one seen, and mlpt/compat_1_1.h's versioned names must lay out exactly like it.
 * Nothing to run: the build fails if they differ. */
#include <stddef.h>

#include "mlpt/transport.h"
#include "mlpt/compat_1_1.h"

#define SAME_OFFSET(field) \
  _Static_assert(offsetof(mlpt_transport_api, field) == offsetof(mlpt_transport_api_1_1, field), #field)
SAME_OFFSET(create);
SAME_OFFSET(destroy);
SAME_OFFSET(send);
SAME_OFFSET(receive);
SAME_OFFSET(release);
_Static_assert(MLPT_TRANSPORT_API_STRUCT_SIZE == MLPT_TRANSPORT_API_STRUCT_SIZE_1_1, "table size");

int mlpt_compat_layout_checked(void) { return 1; }
