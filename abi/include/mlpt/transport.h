/* transport.h: the weight transport component (MLPT_COMPONENT_TRANSPORT).
 *
 * Moves a versioned set of named tensors from the sender side (the trainer) to one or more
 * receivers (the engines). Since 1.2 the weights flow plugin to plugin: the host creates the
 * endpoints and binds them (mlpt_transport_binding): each trainer rank publishes its shards through
 * its sender endpoint (trainer.h, publish_weights) and each engine rank fetches the shards of its
 * own layout through its receiver endpoint (engine.h, fetch_weights); on this path the host only
 * sequences pause -> publish, fetch -> resume and never touches a weight. For a trainer, engine or
 * transport of 1.0 or 1.1 the host calls `send` (with the export) or `receive`/`release` (around
 * load_weights) for that side itself, passing the tensors through (as `mlpt run`'s sparse refit).
 *
 * Versions: every send carries a version strictly greater than the previous send's (a transport
 * refuses another) [checked: versions_monotonic]; a receiver asks for at least some version and
 * gets the newest one available, bit for bit as sent [checked: round_trip_bitwise].
 *
 * Sender ranks (since 1.2): the sender endpoints created with the same `group` and a component
 * group of n ranks publish each version together, each rank its own shards (mlpt.h,
 * mlpt_tensor_shard); a version is available to receivers once every rank has sent it, and the
 * ranks' shards together cover every tensor. A transport takes at most
 * capabilities.max_sender_ranks sender ranks.
 *
 * Sections: Capabilities, Endpoint lifetime, Binding, Send, Receive, Release, The table.
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
  /* Since 1.2: how many sender endpoints of one group may publish a version together (each its own
   * shards); a sender endpoint of a larger component group is refused at create. Absent or 0: 1,
   * and that one sender publishes whole tensors. */
  int32_t max_sender_ranks;
} mlpt_transport_capabilities;
#define MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_transport_capabilities, max_sender_ranks)
#define MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_capabilities, checksum)

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

/* ---- Binding (since 1.2) ---------------------------------------------------------------------- */

/* An endpoint bound to the component that uses it: the host passes a sender's binding to the
 * trainer's publish_weights and a receiver's to the engine's fetch_weights, so that they call the
 * transport without knowing which plugin provides it. The host binds only endpoints of a transport
 * whose plugin declares 1.2 or later (its table has release_received); it relays for an older
 * one. Everything here is the transport plugin's and is borrowed for the call it is passed to: a
 * component must not keep the binding or call it afterwards. Errors returned by `api` are destroyed
 * with `errors`; a component that fails because of one returns an error of its own carrying that
 * code and message. */
typedef struct mlpt_transport_binding {
  size_t struct_size;
  const struct mlpt_transport_api* api; /* the transport's table */
  const mlpt_error_api* errors;         /* destroys errors returned by `api` */
  mlpt_transport* transport;            /* the endpoint: a sender for publish, a receiver for fetch */
} mlpt_transport_binding;
#define MLPT_TRANSPORT_BINDING_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_binding, transport)

/* ---- Send ------------------------------------------------------------------------------------ */

/* Publishes `tensors` as `version` (one rank's part of it, when the endpoint is one of several
 * sender ranks). Blocks until every receiver the config expects holds the data (or, zero-copy, can
 * be handed the pointers) or until `timeout_ms`: a receiver that fails or never arrives gives
 * MLPT_DEADLINE_EXCEEDED / MLPT_UNAVAILABLE naming it; the sender is never blocked beyond the
 * timeout. A receiver may get nothing before its first receive says what it wants (its layout),
 * so a host receives while it sends (on another thread or process). Zero-copy transports require
 * the tensors to stay valid and unchanged until the next send or destroy (the trainer's export and
 * publish guarantee that). */
typedef struct mlpt_transport_send_args {
  size_t struct_size;
  mlpt_transport* transport;
  uint64_t version;                 /* in: > the previous send's version */
  const mlpt_named_tensor* tensors; /* in */
  size_t num_tensors;               /* in */
  int64_t timeout_ms;               /* in: < 0 waits forever (not recommended) */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
  /* Since 1.2 (in): parallel to `tensors`, which part of its global tensor each one is (mlpt.h,
   * mlpt_tensor_shard). NULL (and absent): whole tensors. A transport whose max_sender_ranks is 1
   * refuses a part that is not whole with MLPT_UNIMPLEMENTED naming the tensor. */
  const mlpt_tensor_shard* shards;
  /* Since 1.2 (in): when the tensors' device data may be read (mlpt.h, Device memory): the
   * transport waits for it before reading, and a zero-copy transport hands it to the receivers.
   * NULL (and absent): ready at the call. */
  const mlpt_device_ready* ready;
} mlpt_transport_send_args;
#define MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_send_args, ready)
#define MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_send_args, timeout_ms)

/* ---- Receive --------------------------------------------------------------------------------- */

/* Waits for a version >= min_version and returns the newest available. The tensors are owned by
 * the transport and stay valid until `release` of that version (or destroy); release before the
 * next receive. MLPT_DEADLINE_EXCEEDED after timeout_ms [checked: receive_times_out]; MLPT_DATA_LOSS on a checksum mismatch;
 * MLPT_UNAVAILABLE when the sender went away.
 *
 * The layout (since 1.2): a receiver says which tensors it wants and which part of each (`want_*`,
 * e.g. an engine rank's weight_shards), and gets exactly those, in that order, cut from what the
 * sender ranks published [checked: wanted_layout_bitwise]: each element it wants is read from one sender's shard, and a wanted
 * tensor that is a published tensor as it is (same name, dtype and part) is handed over as it is
 * (zero-copy where the transport is). Without `want` (num_want 0, or an older receiver) it gets
 * every published tensor whole, each name once in the order the sender ranks sent them (rank 0
 * first), assembled from the ranks' shards when they sent shards. A wanted tensor no sender has, or whose dtype or global
 * shape differs, is MLPT_INVALID_ARGUMENT naming it; an element no sender's shard holds is
 * MLPT_FAILED_PRECONDITION naming it. Cutting is done in host memory: a transport that cannot cut
 * a tensor in device memory returns MLPT_UNIMPLEMENTED naming it (handing one over as it is needs
 * no cut). */
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
  /* Since 1.2 (in): the wanted layout, num_want entries each. want_tensors give the name, dtype
   * and the part's shape (data is not read); want_shards, parallel to them, the part of the global
   * tensor (NULL: whole tensors). Borrowed for the call. */
  const mlpt_named_tensor* want_tensors;
  const mlpt_tensor_shard* want_shards;
  size_t num_want;
  /* Since 1.2 (out): parallel to out_tensors, the part of its global tensor each one is; lives as
   * long as out_tensors. NULL: whole tensors. The receiver sets it to NULL before the call (an older
   * transport never writes it). */
  const mlpt_tensor_shard* out_shards;
  /* Since 1.2 (out): when the received tensors' device data may be read (mlpt.h, Device memory);
   * its handles live until `release`. Left zeroed (and absent): ready on return. */
  mlpt_device_ready out_ready;
} mlpt_transport_receive_args;
#define MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_ready)
#define MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_num_tensors)

/* ---- Release --------------------------------------------------------------------------------- */

/* Gives back what `receive` returned for `version`: the tensors are invalid afterwards. Releasing
 * a version the endpoint does not hold is an error that names the version. Receivers only.
 * `release_received` takes these args (since 1.2); `release`, its 1.0 form, takes the endpoint and
 * the version. */
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

/* One endpoint is used by one thread at a time; different endpoints are independent (a trainer
 * publishing through one while an engine fetches through another, from two threads, is the usual
 * case). */
typedef struct mlpt_transport_api {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_transport_create_args* args);
  /* NULL is a no-op [checked: null_destroy_is_noop]; unblocks nobody else forever */
  void (*destroy)(mlpt_transport* transport);
  mlpt_error* (*send)(mlpt_transport_send_args* args);       /* senders only */
  mlpt_error* (*receive)(mlpt_transport_receive_args* args); /* receivers only */
  /* See Release, in the calling convention of 1.0. Superseded by release_received (1.2); a 1.2
   * host calls this only when the table is older. */
  mlpt_error* (*release)(mlpt_transport* transport, uint64_t version); /* receivers only */

  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;

  /* ---- Since 1.2: read only when struct_size covers it (MLPT_HAS_FIELD); a 1.2 transport sets
   * it, and keeps `release` set for older hosts. ---- */

  /* See Release. */
  mlpt_error* (*release_received)(mlpt_transport_release_args* args); /* receivers only */
} mlpt_transport_api;
#define MLPT_TRANSPORT_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_transport_api, release_received)
/* The table of ABI 1.0, unchanged in 1.1: the least a host accepts. */
#define MLPT_TRANSPORT_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_transport_api, release)
#define MLPT_TRANSPORT_API_STRUCT_SIZE_1_1 MLPT_TRANSPORT_API_STRUCT_SIZE_1_0

#ifdef __cplusplus
}
#endif

#endif /* MLPT_TRANSPORT_H_ */
