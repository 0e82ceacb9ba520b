/* mlpt.h: the plugin boundary of mlpt, version 1.
 *
 * mlpt runs the MLPerf LLM post-training benchmark (GRPO on agentic SWE tasks) as a small host
 * (the `mlpt` driver) that loads every moving part from shared objects through this C11 ABI:
 * policy trainer, inference engine, weight transport, sandbox, reward and agent harness.
 * This header holds what every component shares; one header per component kind holds its
 * function table (trainer.h, engine.h, transport.h, sandbox.h, reward.h, harness.h).
 *
 * Reading guide, top to bottom:
 *   Versions          what the numbers mean and which changes bump which number
 *   Struct sizes      the `struct_size` convention and the checked accessor
 *   Strings, sinks    binary-safe strings, and how a plugin hands variable-size output back
 *   Errors            error objects: code, message, who destroys them
 *   Tensors           DLPack, as tensors cross the boundary
 *   Host services     what the host lends to a plugin: log, metric, clock, cancellation
 *   Components        kinds, the per-component record
 *   Plugin            the descriptor and the single exported entry point
 *
 * Conventions used by every function in the ABI:
 *   - Every struct that crosses the boundary starts with `size_t struct_size`. The writer of the
 *     struct sets it to the size it was compiled with (use MLPT_STRUCT_SIZE); the reader checks it
 *     with MLPT_HAS_FIELD before touching a field that a smaller (older) struct may not have.
 *   - Every function returns `mlpt_error*`: NULL on success. An error is owned by the caller once
 *     returned and is destroyed with the `error_destroy` of the table whose function returned it.
 *   - Every call takes one `*_args` struct. Fields marked `in` are set by the caller; fields marked
 *     `out` are set by the callee on success and are unspecified on error.
 *   - Pointers passed into a call are borrowed: they only need to live for the duration of the call
 *     unless the documentation says otherwise. Pointers handed out by a call say how long they live.
 *   - Every function says whether it may be called concurrently. "Thread-safe" means any number of
 *     threads may call it at once on the same object; "not thread-safe" means the caller serialises
 *     calls on that object (different objects may still be used from different threads).
 *   - Configurations arrive as one JSON document per component instance (the host converts its
 *     TOML table), so a plugin in any language can read it. Unknown keys are an error.
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
 *
 * The ABI version is (major, minor).
 *   - major changes when a struct field is removed, reordered or retyped, a function's meaning
 *     changes, or an enum value is renumbered. A host refuses a plugin of another major.
 *   - minor changes when a field is appended to a struct, a function is appended to a table, or an
 *     enum value is added. Both directions keep working: a newer host reads an older struct only up
 *     to its `struct_size`; a plugin built against a newer minor than the host is loaded with a note
 *     in the log, and the host never reads past the sizes it knows.
 */
#define MLPT_ABI_VERSION_MAJOR 1
#define MLPT_ABI_VERSION_MINOR 1

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
 * mlpt_named_tensor: a tensor with the name it has in the model's checkpoint (HF naming, e.g.
 * "model.language_model.layers.0.linear_attn.in_proj_qkv.weight").
 */
typedef struct mlpt_named_tensor {
  size_t struct_size;
  mlpt_string name;
  DLTensor tensor;
} mlpt_named_tensor;
#define MLPT_NAMED_TENSOR_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_named_tensor, tensor)

/* ---- Host services ----------------------------------------------------------------------------
 *
 * What the host lends to every plugin at load time. The table and `ctx` live until the plugin's
 * `shutdown` returns. Every function here is thread-safe and may be called from any thread the
 * plugin creates, and never blocks for long.
 */
typedef enum mlpt_log_level {
  MLPT_LOG_DEBUG = 0,
  MLPT_LOG_INFO = 1,
  MLPT_LOG_WARNING = 2,
  MLPT_LOG_ERROR = 3,
} mlpt_log_level;

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
} mlpt_host_services;
#define MLPT_HOST_SERVICES_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_host_services, errors)

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
   * Read only after MLPT_HAS_FIELD(descriptor, mlpt_plugin_descriptor, build_info). */
  mlpt_string build_info;
} mlpt_plugin_descriptor;
#define MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_plugin_descriptor, build_info)
/* The size of a 1.0 descriptor: the least a host accepts. */
#define MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_plugin_descriptor, shutdown)

/* The arguments of the entry point. */
typedef struct mlpt_plugin_init_args {
  size_t struct_size;
  mlpt_abi_version host_abi_version;  /* in */
  const mlpt_host_services* host;     /* in: lives until shutdown returns */
  const mlpt_plugin_descriptor* descriptor; /* out: lives until shutdown returns */
} mlpt_plugin_init_args;
#define MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_plugin_init_args, descriptor)

/* The single symbol a plugin exports (extern "C", default visibility). The host calls it once,
 * right after dlopen, before anything else. The plugin:
 *   - refuses a host of another major version by returning NULL after saying why through
 *     `host->log` (the host then reports the refusal);
 *   - otherwise sets `args->descriptor` and returns NULL.
 * A non-NULL return is an error the host reports; it is destroyed with the descriptor's
 * `errors.error_destroy` when `descriptor` was set, else leaked (plugins should not do that).
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
