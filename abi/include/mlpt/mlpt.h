/* mlpt.h: the plugin boundary of mlpt, version 1.2.
 *
 * mlpt runs the MLPerf LLM post-training benchmark (GRPO on agentic SWE tasks) as a small host
 * (the `mlpt` driver) that loads every moving part from shared objects through this C11 ABI:
 * policy trainer, inference engine, weight transport, sandbox, reward and agent harness.
 * This header holds what every component shares; one header per component kind holds its
 * function table (trainer.h, engine.h, transport.h, sandbox.h, reward.h, harness.h).
 *
 * Reading guide, top to bottom:
 *   Versions          what the numbers mean, the history, and how old and new sides meet
 *   Struct sizes      the `struct_size` convention, the checked accessor, frozen sizes
 *   Extensions        typed chains (`extension_start`) for additions that need no new version
 *   Strings, sinks    binary-safe strings, and how a plugin hands variable-size output back
 *   Errors            error objects: code, message, who destroys them
 *   Tensors           DLPack, as tensors cross the boundary
 *   Host services     what the host lends to a plugin: log, metric, clock, cancellation, and
 *                     (1.2) where the process runs and a key-value store for rendezvous
 *   Components        kinds, the per-component record
 *   Component groups  (1.2) an instance as one rank of several; what "collective" means
 *   Plugin            the descriptor and the single exported entry point
 *
 * Conventions used by every function in the ABI:
 *   - Every struct that crosses the boundary starts with `size_t struct_size`. The writer of the
 *     struct sets it to the size it was compiled with (use MLPT_STRUCT_SIZE); the reader checks it
 *     with MLPT_HAS_FIELD before touching a field that a smaller (older) struct may not have.
 *   - Every function returns `mlpt_error*`: NULL on success. An error is owned by the caller once
 *     returned and is destroyed with the `error_destroy` of the table whose function returned it.
 *   - Every component function takes one `*_args` struct (since 1.2 without exception; `destroy`
 *     functions, which cannot fail, take the handle). Fields marked `in` are set by the caller;
 *     fields marked `out` are set by the callee on success and are unspecified on error. Host
 *     services take the table's `ctx` first, then their arguments.
 *   - Enumerations are typed (an `mlpt_*` or DLPack enum type, never a bare int); every enum is
 *     int-sized. A reader treats a value it does not know as the documentation of that field says.
 *   - Arrays of structs never grow: the element type of an array is frozen at the version that
 *     introduced it (a reader indexes with its own sizeof). A later minor adds a parallel array.
 *   - Pointers passed into a call are borrowed: they only need to live for the duration of the call
 *     unless the documentation says otherwise. Pointers handed out by a call say how long they live.
 *   - Every function says whether it may be called concurrently. "Thread-safe" means any number of
 *     threads may call it at once on the same object; "not thread-safe" means the caller serialises
 *     calls on that object (different objects may still be used from different threads).
 *   - Configurations arrive as one JSON document per component instance (the host converts its
 *     TOML table), so a plugin in any language can read it. Unknown keys are an error.
 *   - A promise that the conformance suite (`mlpt check plugins`) verifies is marked
 *     [checked: id], the id of its check in the suite's report. Every capability is verified too
 *     (see Components).
 */
#ifndef MLPT_MLPT_H_
#define MLPT_MLPT_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions ---------------------------------------------------------------------------------
 *
 * The ABI version is (major, minor). History:
 *   1.0  the first stable boundary.
 *   1.1  mlpt_plugin_descriptor.build_info appended.
 *   1.2  extension chains (`extension_start`) appended to the descriptor, the init args, the host
 *        services and every component table; host services: the process description and the
 *        key-value store; component groups (create args of trainer, engine and transport; a
 *        trainer says its data-parallel replica: out_data_parallel_rank / _size) and the global
 *        normaliser of train_step; an asynchronous engine (`submit`, completed through
 *        `on_ready`, `request_is_ready` or `request_await`; results owned by the engine, as long as
 *        what was generated, freed by `request_release`); one calling convention (engine
 *        `query_model_info`, `pause_generation` and `resume_generation`, transport `release_received` take
 *        their args; the functions they supersede stay, for older hosts); typed enums (trainer `device_type`, reward `episode_end`); a plugin refuses a
 *        host with an error object; the DLPack version is pinned; sharded tensors
 *        (mlpt_tensor_shard: the trainer's `out_shards`, the engine's `weight_shards` and
 *        load_weights `shards`); weights flow plugin to plugin (transport bindings, trainer
 *        `publish_weights`, engine `fetch_weights`, shards on send and the wanted layout on
 *        receive, several sender ranks: transport `max_sender_ranks`); readiness of device
 *        memory (mlpt_device_ready: export and receive say it, send and load_weights are told
 *        it). The headers of 1.0 and 1.1 are kept, frozen, in abi/snapshots/<version>/.
 *
 * What changes which number:
 *   - major changes when a struct field is removed, reordered or retyped, a function's meaning
 *     changes, or an enum value is renumbered. A host refuses a plugin of another major, and a
 *     plugin refuses a host of another major.
 *   - minor changes when a field is appended to a struct, a function is appended to a table, or an
 *     enum value is added. Both directions keep working: each side reads a struct of the other only
 *     up to the `struct_size` the other side wrote, field by field (MLPT_HAS_FIELD), and a field
 *     that is absent means what its documentation says ("absent: ..."). A side refuses only what it
 *     truly needs and the other lacks, naming the field and the version that introduced it.
 *   - So a function that needs a new shape is appended under a new name, and the old one stays in
 *     its slot (1.2: engine `pause` and `pause_generation`, transport `release` and
 *     `release_received`). tests/unit/abi compares every struct of every minor with the layouts
 *     kept in abi/snapshots/layouts.txt: offsets, sizes and declared types never change.
 *
 * The negotiated version of a loaded plugin is the smaller of the host's and the plugin's (same
 * major); both sides behave as that version promises. `mlpt plugins inspect` shows it.
 */
#define MLPT_ABI_VERSION_MAJOR 1
#define MLPT_ABI_VERSION_MINOR 2

typedef struct mlpt_abi_version {
  uint32_t major;
  uint32_t minor;
} mlpt_abi_version;

/* ---- Struct sizes -----------------------------------------------------------------------------
 *
 * MLPT_STRUCT_SIZE(type, last_field): the size of `type` up to and including `last_field`. Each
 * header defines `<TYPE>_STRUCT_SIZE` this way, so the size of a version of a struct is fixed by its
 * last field at that version, not by trailing padding the compiler may add.
 *
 * MLPT_HAS_FIELD(ptr, type, field): true when the struct at `ptr`, as written by the other side,
 * is large enough to contain `field`. Check it before reading any field appended after 1.0.
 */
#define MLPT_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

#define MLPT_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (ptr)->struct_size >= MLPT_STRUCT_SIZE(type, field))

/* The size of each version of a struct that grew is frozen as a named constant beside it:
 * `<TYPE>_STRUCT_SIZE_1_0` (and `_1_1` where 1.1 differed from 1.0): the size that version's header
 * gave `<TYPE>_STRUCT_SIZE`.
 * A reader requires the 1.0 size (or the size of the version that introduced the struct) and
 * checks every later field with MLPT_HAS_FIELD; a struct without such constants has not grown. */

/* ---- Extensions -------------------------------------------------------------------------------
 *
 * Optional, typed additions that travel beside a struct without changing its layout (PJRT's
 * `extension_start`). A struct that carries `const mlpt_extension* extension_start` (the
 * descriptor, the init args, the host services and every component table, since 1.2) points to a
 * chain of entries. Each entry starts with an mlpt_extension header; `type` says which struct it
 * is, `struct_size` its whole size (header included), `next` the following entry or NULL.
 *
 * Rules: a reader walks the chain and skips every entry whose type it does not know (never an
 * error); it reads a known entry only up to that entry's `struct_size`. The chain and its entries
 * are owned by the writer of the struct that carries them and live as long as that struct.
 * mlpt_find_extension stops after MLPT_EXTENSION_CHAIN_LIMIT entries, so a cyclic chain (a bug)
 * cannot hang a reader.
 *
 * Reserved in 1.2: the ABI defines no extension type yet. The fields exist so that a later minor
 * can add optional data to any call without a new struct version. Until then:
 *   - a writer sets every `extension_start` to NULL, unless it carries a private entry;
 *   - a reader never requires an extension and treats NULL as "none";
 *   - types below MLPT_EXTENSION_TYPE_PRIVATE_BASE are reserved for this header: a later minor
 *     defines each here, with its struct, and says which calls read it;
 *   - types from MLPT_EXTENSION_TYPE_PRIVATE_BASE up are free for a plugin and a host (or two
 *     plugins) to agree on privately; every other reader skips them.
 */
typedef enum mlpt_extension_type {
  MLPT_EXTENSION_TYPE_PRIVATE_BASE = 0x10000, /* first type for private agreements */
} mlpt_extension_type;

typedef struct mlpt_extension {
  size_t struct_size;
  mlpt_extension_type type;
  const struct mlpt_extension* next;
} mlpt_extension;
#define MLPT_EXTENSION_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_extension, next)

#define MLPT_EXTENSION_CHAIN_LIMIT 256

/* The first entry of `type` in the chain starting at `start`, or NULL (also for a malformed entry:
 * struct_size smaller than the header). Thread-safe; reads nothing but the chain. */
static inline const mlpt_extension* mlpt_find_extension(const mlpt_extension* start,
                                                        mlpt_extension_type type) {
  int walked = 0;
  for (const mlpt_extension* e = start; e != NULL && walked < MLPT_EXTENSION_CHAIN_LIMIT;
       e = e->next, ++walked) {
    if (e->struct_size < MLPT_EXTENSION_STRUCT_SIZE) return NULL;
    if (e->type == type) return e;
  }
  return NULL;
}

/* ---- Strings and sinks ------------------------------------------------------------------------
 *
 * mlpt_string: a borrowed byte range. Text is UTF-8; no terminating NUL is implied or required
 * (a producer may add one after `size`, a consumer never relies on it). {NULL, 0} is the empty
 * string.
 */
typedef struct mlpt_string {
  const char* data;
  size_t size;
} mlpt_string;

/* mlpt_sink: how a callee returns output of a size the caller cannot know in advance (command
 * output, a file, a JSON document). The caller owns the memory: the callee calls `write` zero or
 * more times, each with a chunk that the sink appends; `data` is borrowed for the call to `write`.
 * `write` is called only from within the call the sink was passed to, from the calling thread,
 * unless the function documents otherwise. A sink never fails; it may drop bytes beyond a limit
 * it was built with (the function that took it says when that can happen). */
typedef struct mlpt_sink {
  size_t struct_size;
  void* ctx;
  void (*write)(void* ctx, const char* data, size_t size);
} mlpt_sink;
#define MLPT_SINK_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sink, write)

/* ---- Errors -----------------------------------------------------------------------------------
 *
 * The codes are the canonical status codes (as in absl::StatusCode and gRPC), so any language's
 * status type maps onto them. The message says what went wrong and where, for a person.
 */
typedef enum mlpt_error_code {
  MLPT_OK = 0, /* never carried by an error object; NULL means success */
  MLPT_CANCELLED = 1,
  MLPT_UNKNOWN = 2,
  MLPT_INVALID_ARGUMENT = 3,
  MLPT_DEADLINE_EXCEEDED = 4,
  MLPT_NOT_FOUND = 5,
  MLPT_ALREADY_EXISTS = 6,
  MLPT_PERMISSION_DENIED = 7,
  MLPT_RESOURCE_EXHAUSTED = 8,
  MLPT_FAILED_PRECONDITION = 9,
  MLPT_ABORTED = 10,
  MLPT_OUT_OF_RANGE = 11,
  MLPT_UNIMPLEMENTED = 12,
  MLPT_INTERNAL = 13,
  MLPT_UNAVAILABLE = 14,
  MLPT_DATA_LOSS = 15,
} mlpt_error_code;

/* Every enum of the ABI is int-sized (an enum whose values fit in int is as wide as int in C and
 * C++ on the platforms mlpt supports); this typedef fails to compile where that is not so. */
typedef char mlpt_enums_are_int_sized[sizeof(mlpt_error_code) == sizeof(int) ? 1 : -1];

/* An error object. Opaque: only its creator knows its layout. Created by a plugin function (and
 * then destroyed by that plugin's `error_destroy`) or by a host service (destroyed by the host's). */
typedef struct mlpt_error mlpt_error;

/* The three error functions every error creator provides (in mlpt_plugin_descriptor and in
 * mlpt_host_services). All three are thread-safe and accept any error the creator returned. */
typedef struct mlpt_error_api {
  size_t struct_size;
  /* Destroys `error`; NULL is a no-op. The error and its message are invalid afterwards. */
  void (*error_destroy)(mlpt_error* error);
  /* The code; never MLPT_OK. */
  mlpt_error_code (*error_code)(const mlpt_error* error);
  /* The message; lives as long as `error`. */
  mlpt_string (*error_message)(const mlpt_error* error);
} mlpt_error_api;
#define MLPT_ERROR_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_error_api, error_message)

/* ---- Tensors ----------------------------------------------------------------------------------
 *
 * Tensors cross the boundary as DLPack `DLTensor` (dlpack/dlpack.h), in CPU or CUDA memory,
 * zero-copy within a process. A DLTensor is always borrowed: its `data`, `shape` and `strides`
 * live as long as the function that handed it out says. `strides` NULL means compact row-major.
 *
 * The DLPack the ABI speaks: `DLTensor`, `DLDevice` and `DLDataType` as DLPack 0.6 defines them
 * (DLPACK_VERSION 60), whose layout DLPack has kept unchanged through 1.x; nothing else of DLPack
 * (no DLManagedTensor: ownership is this ABI's, per function). Building against an older DLPack
 * fails below.
 *
 * Device memory (since 1.2): when the data of a tensor in device memory (kDLCUDA) may be read is
 * said per function, by an mlpt_device_ready beside the tensors, as PJRT says it with its events:
 *   - the functions that hand weights over say it in an `out_ready` field: the trainer's
 *     export_weights and the transport's receive;
 *   - the functions that take weights are told it in a `ready` field: the transport's send and the
 *     engine's load_weights (publish_weights and fetch_weights pass it on inside the plugins);
 *   - every other function, and every tensor in host memory (kDLCPU, kDLCUDAHost): ready when the
 *     call that hands it over returns (an input: at the call), readable from any stream.
 * A function without such a field in an older struct (absent) means ready on return.
 */
#if !defined(DLPACK_VERSION) || DLPACK_VERSION < 60
#error "mlpt's ABI needs DLPack 0.6 or newer (DLPACK_VERSION >= 60)"
#endif
#define MLPT_DLPACK_VERSION 60 /* the DLPack version whose DLTensor layout the ABI speaks */

/* When device data is ready (since 1.2). */
typedef enum mlpt_ready_kind {
  /* Every write has finished (the producer synchronised its streams) before the call returned; a
   * consumer reads from any stream without waiting. A zeroed mlpt_device_ready says this. */
  MLPT_READY_ON_RETURN = 0,
  /* The writes are queued on `stream` and `event` is recorded after the last of them: a consumer
   * makes its own stream wait for `event` (cudaStreamWaitEvent) before reading, or synchronises it. */
  MLPT_READY_AFTER_EVENT = 1,
} mlpt_ready_kind;

/* Readiness of a set of tensors in device memory (since 1.2). Host-memory tensors ignore it.
 * `stream` and `event` are CUDA handles (cudaStream_t, cudaEvent_t) of the device the tensors are
 * on, owned by the producer and valid as long as the tensors they describe; a consumer never
 * destroys them. */
typedef struct mlpt_device_ready {
  size_t struct_size;
  mlpt_ready_kind kind;
  void* stream; /* the producer's stream that wrote the data; NULL: the legacy default stream */
  void* event;  /* MLPT_READY_AFTER_EVENT: recorded on `stream` after the last write; else NULL */
} mlpt_device_ready;
#define MLPT_DEVICE_READY_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_device_ready, event)

/* mlpt_named_tensor: a tensor with the name it has in the model's checkpoint (HF naming, e.g.
 * "model.language_model.layers.0.linear_attn.in_proj_qkv.weight").
 */
typedef struct mlpt_named_tensor {
  size_t struct_size;
  mlpt_string name;
  DLTensor tensor;
} mlpt_named_tensor;
#define MLPT_NAMED_TENSOR_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_named_tensor, tensor)

/* mlpt_tensor_shard (since 1.2): which part of a global tensor a DLTensor holds, when the weights
 * are split over the ranks of a component group (tensor, expert or pipeline parallelism).
 *
 * The tensor it describes holds the box of the global tensor that starts at `offsets` and has the
 * tensor's own shape: element i (an ndim-index) of the tensor is element offsets + i of the global
 * tensor. `global_shape` and `offsets` have the tensor's ndim entries, with
 * 0 <= offsets[d] and offsets[d] + tensor.shape[d] <= global_shape[d]. A shard never holds a
 * strided selection: a layout that interleaves (e.g. fused gate/up projections split by TP) names
 * its parts as separate tensors.
 *
 * Shards of one global tensor across a group may overlap (replicas); together they must cover it.
 * A tensor without a shard descriptor (a NULL array, or an older side that has none) is whole:
 * offsets 0 and global_shape equal to its shape. Arrays of shards are always parallel to an array
 * of named tensors (same length and order), so the element type never grows (see the conventions
 * at the top). The pointers live as long as the tensor they describe. */
typedef struct mlpt_tensor_shard {
  size_t struct_size;
  const int64_t* global_shape; /* ndim entries */
  const int64_t* offsets;      /* ndim entries */
} mlpt_tensor_shard;
#define MLPT_TENSOR_SHARD_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_tensor_shard, offsets)

/* ---- Host services ----------------------------------------------------------------------------
 *
 * What the host lends to every plugin at load time. The table, `ctx` and everything they point to
 * live until the plugin's `shutdown` returns. Every function here is thread-safe and may be called
 * from any thread the plugin creates. log, metric, now_ns and is_cancelled never block for long.
 */
typedef enum mlpt_log_level {
  MLPT_LOG_DEBUG = 0,
  MLPT_LOG_INFO = 1,
  MLPT_LOG_WARNING = 2,
  MLPT_LOG_ERROR = 3,
} mlpt_log_level;

/* What the process the plugin runs in does in the run (since 1.2). */
typedef enum mlpt_process_role {
  MLPT_PROCESS_ROLE_ALL = 1,     /* one process runs the host loop and every component */
  MLPT_PROCESS_ROLE_HOST = 2,    /* runs the host loop (rollouts, reward, harness) */
  MLPT_PROCESS_ROLE_TRAINER = 3, /* runs trainer ranks */
  MLPT_PROCESS_ROLE_ENGINE = 4,  /* runs engine ranks */
} mlpt_process_role;

/* Where the process runs among all processes of the run (since 1.2). Ranks count from 0. One
 * process alone is {rank 0, world_size 1, local_rank 0, local_size 1, node_index 0,
 * num_nodes 1, MLPT_PROCESS_ROLE_ALL}. */
typedef struct mlpt_process_info {
  size_t struct_size;
  int32_t rank;       /* this process among all processes of the run */
  int32_t world_size; /* processes in the run */
  int32_t local_rank; /* this process among the processes on its node */
  int32_t local_size; /* processes on this node */
  int32_t node_index; /* this node among the run's nodes */
  int32_t num_nodes;  /* nodes in the run */
  mlpt_process_role role;
} mlpt_process_info;
#define MLPT_PROCESS_INFO_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_process_info, role)

/* The key-value store the launcher provides for rendezvous (since 1.2): how ranks exchange small
 * things such as NCCL unique ids and UCX worker addresses, never through files or fixed ports.
 * Keys and values are bytes; keys are shared by every process of the run, so a plugin prefixes its
 * own (e.g. "transport.ucx/<group>/address"). Keys are written once: a second put of a key with a
 * different value is MLPT_ALREADY_EXISTS (the same value again is not an error). Errors returned
 * here are the host's: destroy them with the host services' `errors`. */
typedef struct mlpt_kv_put_args {
  size_t struct_size;
  mlpt_string key;   /* in: not empty */
  mlpt_string value; /* in: may be empty */
} mlpt_kv_put_args;
#define MLPT_KV_PUT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_kv_put_args, value)

/* Waits until `key` is put by any process, then writes its value to `value`. Returns
 * MLPT_DEADLINE_EXCEEDED naming the key after `timeout_ms` (< 0: no limit), MLPT_CANCELLED promptly
 * once the run is being stopped. */
typedef struct mlpt_kv_get_args {
  size_t struct_size;
  mlpt_string key;        /* in */
  int64_t timeout_ms;     /* in */
  const mlpt_sink* value; /* in: receives the value */
} mlpt_kv_get_args;
#define MLPT_KV_GET_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_kv_get_args, value)

/* Returns once every process of the run has entered a barrier of the same `name` (each name is
 * used once), MLPT_DEADLINE_EXCEEDED after `timeout_ms` (< 0: no limit), MLPT_CANCELLED promptly
 * once the run is being stopped. Collective over the whole run. */
typedef struct mlpt_barrier_args {
  size_t struct_size;
  mlpt_string name;   /* in: not empty */
  int64_t timeout_ms; /* in */
} mlpt_barrier_args;
#define MLPT_BARRIER_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_barrier_args, timeout_ms)

typedef struct mlpt_host_services {
  size_t struct_size;
  void* ctx; /* passed back as the first argument of every function below */

  /* The host's version, so a plugin can avoid calling what an older host lacks. */
  mlpt_abi_version abi_version;

  /* Writes one log record attributed to `source` (e.g. the component name). */
  void (*log)(void* ctx, mlpt_log_level level, mlpt_string source, mlpt_string message);

  /* Records a named scalar (e.g. "engine/decode_tokens_per_s") for the run's metrics. */
  void (*metric)(void* ctx, mlpt_string name, double value);

  /* Monotonic clock in nanoseconds, the one the host uses for its own timings. */
  uint64_t (*now_ns)(void* ctx);

  /* Nonzero once the run is being stopped (Ctrl-C, SIGTERM, a fatal error elsewhere). Long calls
   * poll it and return MLPT_CANCELLED promptly. */
  int (*is_cancelled)(void* ctx);

  /* Errors the host creates (e.g. from a sink or a callback) are destroyed with these. */
  mlpt_error_api errors;

  /* Since 1.2. Absent (older host): no extensions. */
  const mlpt_extension* extension_start;
  /* Since 1.2: where this process runs. Absent (older host): one process alone (see above). */
  const mlpt_process_info* process;
  /* Since 1.2: the key-value store and barrier (see above). Absent (older host): none; a plugin
   * that needs them to work across processes refuses the configuration that needs them, naming
   * ABI 1.2; within one process it needs none. */
  mlpt_error* (*kv_put)(void* ctx, mlpt_kv_put_args* args);
  mlpt_error* (*kv_get)(void* ctx, mlpt_kv_get_args* args);
  mlpt_error* (*barrier)(void* ctx, mlpt_barrier_args* args);
} mlpt_host_services;
#define MLPT_HOST_SERVICES_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_host_services, barrier)
#define MLPT_HOST_SERVICES_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_host_services, errors)
#define MLPT_HOST_SERVICES_STRUCT_SIZE_1_1 MLPT_HOST_SERVICES_STRUCT_SIZE_1_0

/* ---- Components -------------------------------------------------------------------------------
 *
 * A plugin provides one or more components. Each has a kind, a name unique within its kind, a
 * function table of its kind (its `struct_size` first) and a capability record of its kind (its
 * `struct_size` first). Capabilities are data the host can check, not guesses: the conformance suite
 * (`mlpt check plugins`) verifies that behaviour matches them.
 */
typedef enum mlpt_component_kind {
  MLPT_COMPONENT_TRAINER = 1,   /* trainer.h   */
  MLPT_COMPONENT_ENGINE = 2,    /* engine.h    */
  MLPT_COMPONENT_TRANSPORT = 3, /* transport.h */
  MLPT_COMPONENT_SANDBOX = 4,   /* sandbox.h   */
  MLPT_COMPONENT_REWARD = 5,    /* reward.h    */
  MLPT_COMPONENT_HARNESS = 6,   /* harness.h   */
} mlpt_component_kind;

typedef struct mlpt_component {
  size_t struct_size;
  mlpt_component_kind kind;
  mlpt_string name;         /* e.g. "qwen35_cpu"; unique among the plugin's components of `kind` */
  mlpt_string description;  /* one line, for `mlpt plugins inspect` */
  const void* api;          /* points to the table of `kind`, e.g. const mlpt_engine_api* */
  const void* capabilities; /* points to the capability record of `kind` */
} mlpt_component;
#define MLPT_COMPONENT_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_component, capabilities)

/* ---- Component groups ---------------------------------------------------------------------------
 *
 * Since 1.2 a trainer, an engine or a transport endpoint may be one rank of a group of instances
 * that act as one (data, tensor or pipeline parallel ranks, usually in different processes). Its
 * create args say which group it belongs to and its rank in it (absent or NULL: a group of one,
 * rank 0). Functions documented as "collective" are called on every rank of the group, in the same
 * order, each with its own args; the ranks meet inside the plugin (through the host's key-value
 * store for their rendezvous). Every other function is per rank.
 */
typedef struct mlpt_component_group {
  size_t struct_size;
  mlpt_string name; /* the same on every rank and unique in the run, e.g. "trainer" */
  int32_t rank;     /* this instance: 0 .. size - 1 */
  int32_t size;     /* instances in the group, >= 1 */
} mlpt_component_group;
#define MLPT_COMPONENT_GROUP_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_component_group, size)

/* ---- Plugin -----------------------------------------------------------------------------------
 *
 * The descriptor a plugin returns from its entry point. It and everything it points to (strings,
 * components, tables, capabilities) are owned by the plugin and stay valid and unchanged until
 * `shutdown` returns.
 */
typedef struct mlpt_plugin_descriptor {
  size_t struct_size;
  mlpt_abi_version abi_version; /* the version the plugin was compiled against */
  mlpt_string name;             /* e.g. "mlpt-reference" */
  mlpt_string version;          /* the plugin's own version, e.g. "0.1.0" */
  size_t num_components;
  const mlpt_component* components; /* array of num_components */

  /* Destroys errors returned by any function of this plugin. */
  mlpt_error_api errors;

  /* Called once, after every object created by the plugin has been destroyed; the host unloads the
   * shared object afterwards. May be NULL. Not thread-safe. */
  void (*shutdown)(void);

  /* Since 1.1: how the plugin was built (compiler, CUDA, NCCL versions), for the compliance report.
   * Absent (1.0 plugin): unknown. */
  mlpt_string build_info;

  /* Since 1.2. Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_plugin_descriptor;
#define MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_plugin_descriptor, extension_start)
/* The size of a 1.0 descriptor: the least a host accepts. */
#define MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_plugin_descriptor, shutdown)
#define MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_1 MLPT_STRUCT_SIZE(mlpt_plugin_descriptor, build_info)

/* The arguments of the entry point. */
typedef struct mlpt_plugin_init_args {
  size_t struct_size;
  mlpt_abi_version host_abi_version;  /* in */
  const mlpt_host_services* host;     /* in: lives until shutdown returns */
  const mlpt_plugin_descriptor* descriptor; /* out: lives until shutdown returns */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_plugin_init_args;
#define MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_plugin_init_args, extension_start)
#define MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_plugin_init_args, descriptor)
#define MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE_1_1 MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE_1_0

/* The single symbol a plugin exports (extern "C", default visibility). The host calls it once,
 * right after dlopen, before anything else. The plugin either
 *   - accepts: sets `args->descriptor` and returns NULL; or
 *   - refuses the host (another major version, or something it truly needs that the host's
 *     version lacks): returns an error whose message says why (code MLPT_FAILED_PRECONDITION) and
 *     sets `args->descriptor` to a descriptor whose struct_size, abi_version, name and errors are
 *     valid, so that the host can destroy the error (it uses nothing else of that descriptor, and
 *     calls its `shutdown` if set); or
 *   - fails (e.g. a license server is unreachable): the same, with the code that fits.
 * 1.0 and 1.1 plugins may also refuse by returning NULL with `args->descriptor` NULL after saying
 * why through `host->log`; a host reports that as a refusal with what was logged.
 * Not thread-safe; called once per load. */
#define MLPT_PLUGIN_ENTRY_SYMBOL "mlpt_plugin_init"
typedef mlpt_error* (*mlpt_plugin_init_fn)(mlpt_plugin_init_args* args);

#if defined(_WIN32)
#define MLPT_EXPORT __declspec(dllexport)
#else
#define MLPT_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MLPT_MLPT_H_ */
