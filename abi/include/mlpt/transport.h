/* transport.h: the weight transport component (MLPT_COMPONENT_TRANSPORT).
 *
 * Moves a versioned set of named tensors from one sender (the trainer side) to one or more
 * receivers (the engines). After every step the host exports the trainer's weights, `send`s them
 * with the new version, and each engine side `receive`s them and loads them.
 *
 * Versions: every send carries a version strictly greater than the previous send's; a receiver
 * asks for at least some version and gets the newest one available.
 *
 * Sections: Capabilities, Endpoint lifetime, Send, Receive, Release, The table.
 */
#ifndef MLPT_TRANSPORT_H_
#define MLPT_TRANSPORT_H_

#include "mlpt/mlpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Capabilities ---------------------------------------------------------------------------- */

typedef struct mlpt_transport_capabilities {
  size_t struct_size;
  int zero_copy;       /* nonzero: receivers see the sender's memory (same process) */
  int cross_process;   /* nonzero: sender and receivers may be different processes */
  int cross_node;      /* nonzero: ... or different machines */
  int supports_cuda;   /* nonzero: tensors in CUDA memory are accepted */
  int checksum;        /* nonzero: `verify_checksum` in the config is honoured */
} mlpt_transport_capabilities;
#define MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_transport_capabilities, checksum)

/* ---- Endpoint lifetime ----------------------------------------------------------------------- */

typedef struct mlpt_transport mlpt_transport; /* opaque: one endpoint, sender or receiver */

typedef enum mlpt_transport_role {
  MLPT_TRANSPORT_SENDER = 1,
  MLPT_TRANSPORT_RECEIVER = 2,
} mlpt_transport_role;

typedef struct mlpt_transport_create_args {
  size_t struct_size;
  mlpt_string config_json;   /* in: e.g. address, bucket size, number of receivers, timeouts */
  mlpt_transport_role role;  /* in */
  /* in: endpoints created in the same process with the same `group` name find each other (the
   * in-process transport uses it; others may ignore it). */
  mlpt_string group;
  mlpt_transport* transport; /* out: destroyed with `destroy` */
  /* Since 1.2 (in): the group this endpoint is one rank of. Absent or NULL: a group of one. */
  const mlpt_component_group* component_group;
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_transport_create_args;
#define MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_create_args, extension_start)
#define MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_create_args, transport)

/* ---- Send ------------------------------------------------------------------------------------ */

/* Publishes `tensors` as `version`. Blocks until every receiver the config expects holds the data
 * (or, zero-copy, has been handed the pointers) or until `timeout_ms`: a receiver that fails or
 * never arrives gives MLPT_DEADLINE_EXCEEDED / MLPT_UNAVAILABLE naming it; the sender is never
 * blocked beyond the timeout. Zero-copy transports require the tensors to stay valid and unchanged
 * until the next send or destroy (the trainer's export guarantees that). */
typedef struct mlpt_transport_send_args {
  size_t struct_size;
  mlpt_transport* transport;
  uint64_t version;                 /* in: > the previous send's version */
  const mlpt_named_tensor* tensors; /* in */
  size_t num_tensors;               /* in */
  int64_t timeout_ms;               /* in: < 0 waits forever (not recommended) */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_transport_send_args;
#define MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_send_args, extension_start)
#define MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_send_args, timeout_ms)

/* ---- Receive --------------------------------------------------------------------------------- */

/* Waits for a version >= min_version and returns the newest available. The tensors are owned by
 * the transport and stay valid until `release` of that version (or destroy); release before the
 * next receive. MLPT_DEADLINE_EXCEEDED after timeout_ms; MLPT_DATA_LOSS on a checksum mismatch;
 * MLPT_UNAVAILABLE when the sender went away. */
typedef struct mlpt_transport_receive_args {
  size_t struct_size;
  mlpt_transport* transport;
  uint64_t min_version;  /* in */
  int64_t timeout_ms;    /* in */
  uint64_t out_version;  /* out */
  const mlpt_named_tensor* out_tensors; /* out */
  size_t out_num_tensors;               /* out */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_transport_receive_args;
#define MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_receive_args, extension_start)
#define MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_num_tensors)

/* ---- Release --------------------------------------------------------------------------------- */

/* Gives back what `receive` returned for `version`: the tensors are invalid afterwards. Releasing
 * a version the endpoint does not hold is an error that names the version. Receivers only. */
typedef struct mlpt_transport_release_args {
  size_t struct_size;
  mlpt_transport* transport;
  uint64_t version; /* in */
  const mlpt_extension* extension_start; /* in: NULL for none */
} mlpt_transport_release_args;
#define MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_transport_release_args, extension_start)
/* The size of the version that introduced it: the least a plugin accepts. */
#define MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE_1_2 MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE

/* ---- The table ------------------------------------------------------------------------------- */

/* One endpoint is used by one thread at a time; different endpoints are independent. */
typedef struct mlpt_transport_api {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_transport_create_args* args);
  void (*destroy)(mlpt_transport* transport); /* NULL is a no-op; unblocks nobody else forever */
  mlpt_error* (*send)(mlpt_transport_send_args* args);       /* senders only */
  mlpt_error* (*receive)(mlpt_transport_receive_args* args); /* receivers only */
  /* Since 1.2 this slot takes its args. A table of a plugin that declares 1.0 or 1.1 (and the table
   * a 1.2 plugin hands a host that declares 1.0 or 1.1) has the older shape here:
   * `mlpt_error* (*release)(mlpt_transport*, uint64_t version)` (mlpt_transport_api_1_1 in
   * mlpt/compat_1_1.h). */
  mlpt_error* (*release)(mlpt_transport_release_args* args); /* receivers only */

  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_transport_api;
#define MLPT_TRANSPORT_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_api, extension_start)
#define MLPT_TRANSPORT_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_api, release)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_TRANSPORT_H_ */
