/* compat_1_1.h: the layouts of ABI 1.0 and 1.1 that 1.2 changed, under names of their own.
 *
 * 1.2 changed the shape of one table slot (transport `release` now takes its `*_args`). A host
 * that loads a plugin declaring 1.0 or 1.1 reads that plugin's table through these types, and a
 * 1.2 plugin that meets a host declaring 1.0 or 1.1 hands it a table of this shape (the SDK does
 * both). Everything else of 1.0 and 1.1 is a prefix of 1.2 and needs no name of its own. The
 * headers exactly as 1.0 and 1.1 had them are kept in abi/snapshots/; a test checks that these
 * types lay out like the snapshot's.
 *
 * When a later version changes a shape again it adds compat_1_2.h; the newest comes first in
 * every adapter (NCCL's plugin headers do the same).
 */
#ifndef MLPT_COMPAT_1_1_H_
#define MLPT_COMPAT_1_1_H_

#include "mlpt/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mlpt_transport_api as 1.0 and 1.1 defined it: `release` takes the endpoint and the version. */
typedef struct mlpt_transport_api_1_1 {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_transport_create_args* args);
  void (*destroy)(mlpt_transport* transport);
  mlpt_error* (*send)(mlpt_transport_send_args* args);
  mlpt_error* (*receive)(mlpt_transport_receive_args* args);
  mlpt_error* (*release)(mlpt_transport* transport, uint64_t version);
} mlpt_transport_api_1_1;
#define MLPT_TRANSPORT_API_STRUCT_SIZE_1_1 MLPT_STRUCT_SIZE(mlpt_transport_api_1_1, release)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_COMPAT_1_1_H_ */
