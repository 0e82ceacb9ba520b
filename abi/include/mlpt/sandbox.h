/* sandbox.h: the sandbox component (MLPT_COMPONENT_SANDBOX).
 *
 * Isolated containers for agent rollouts and for grading. A runtime (one per component instance)
 * creates sandboxes from an image reference (for the reference plugin: a SIF file path). Inside a
 * sandbox the repository is at /testbed; commands run with a clean environment
 * [checked: clean_environment], no network (when
 * the capability says so), a fresh pid namespace and a timeout that kills the whole process tree.
 * The writable layer vanishes with the sandbox.
 *
 * The benchmark runs hundreds of sandboxes at once: every runtime function is thread-safe; calls
 * on one sandbox are serialised by the caller (one rollout owns one sandbox).
 *
 * Sections: Capabilities, Runtime, Sandbox lifetime, Exec, Files, The table.
 */
#ifndef MLPT_SANDBOX_H_
#define MLPT_SANDBOX_H_

#include "mlpt/mlpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Capabilities ---------------------------------------------------------------------------- */

typedef struct mlpt_sandbox_capabilities {
  size_t struct_size;
  int isolates_network;   /* nonzero: no interface but loopback inside */
  int isolates_pids;      /* nonzero: fresh pid namespace per sandbox */
  int limits_memory;      /* nonzero: `memory_limit_mb` in create is enforced */
  int limits_processes;   /* nonzero: `max_processes` in create is enforced */
  int discards_writes;    /* nonzero: the writable layer vanishes with the sandbox */
} mlpt_sandbox_capabilities;
#define MLPT_SANDBOX_CAPABILITIES_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_sandbox_capabilities, discards_writes)

/* ---- Runtime --------------------------------------------------------------------------------- */

typedef struct mlpt_sandbox_runtime mlpt_sandbox_runtime; /* opaque */
typedef struct mlpt_sandbox mlpt_sandbox;                 /* opaque */

typedef struct mlpt_sandbox_runtime_create_args {
  size_t struct_size;
  mlpt_string config_json;        /* in: e.g. runtime "auto" | "apptainer" | "bwrap", cache dir */
  mlpt_sandbox_runtime* runtime;  /* out: destroyed with `runtime_destroy` */
  mlpt_string out_runtime_name;   /* out: the runtime chosen, lives as long as `runtime` */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_runtime_create_args;
#define MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_runtime_create_args, extension_start)
#define MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_runtime_create_args, out_runtime_name)

/* ---- Sandbox lifetime ------------------------------------------------------------------------ */

typedef struct mlpt_sandbox_create_args {
  size_t struct_size;
  mlpt_sandbox_runtime* runtime;
  mlpt_string image;        /* in: image reference, e.g. "/images/pkg_final_abc123.sif" */
  int64_t memory_limit_mb;  /* in: 0 = the runtime's default */
  int64_t max_processes;    /* in: 0 = the runtime's default */
  mlpt_sandbox* sandbox;    /* out: destroyed with `destroy` */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_create_args;
#define MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_create_args, extension_start)
#define MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_create_args, sandbox)

/* ---- Exec ------------------------------------------------------------------------------------ */

/* Runs `command` with `/bin/sh -c` inside the sandbox and waits. stdout and stderr are merged, in
 * order, into `output` [checked: output_merged_in_order]; at most `output_limit` bytes are written
 * (the rest is counted, dropped and reported in out_output_truncated) [checked: output_limit_truncates].
 * Binary output passes through unchanged [checked: binary_output_unchanged]. A long call: it returns
 * MLPT_CANCELLED promptly once the host's is_cancelled turns nonzero
 * [checked: exec_honours_host_cancellation]. */
typedef struct mlpt_sandbox_exec_args {
  size_t struct_size;
  mlpt_sandbox* sandbox;
  mlpt_string command;       /* in */
  mlpt_string workdir;       /* in: empty = /testbed [checked: default_workdir_testbed] */
  /* in: > 0; on expiry the whole process tree is killed [checked: timeout_kills_tree] */
  int64_t timeout_ms;
  size_t output_limit;       /* in: bytes; 0 = the runtime's default (stated in its docs) */
  const mlpt_sink* output;   /* in: receives the output; may be NULL to discard it */
  /* out: the shell's status; 128+N when killed by signal N [checked: exit_code_of_signal]; -1 timeout */
  int32_t out_exit_code;
  int out_timed_out;         /* out: nonzero when the timeout killed it */
  int out_output_truncated;  /* out: nonzero when output beyond output_limit was dropped */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_exec_args;
#define MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_exec_args, extension_start)
#define MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_exec_args, out_output_truncated)

/* ---- Files ----------------------------------------------------------------------------------- */

/* Reads a whole regular file from the sandbox into `content`. Errors: MLPT_NOT_FOUND if it does not
 * exist [checked: read_missing_file_not_found]; MLPT_INVALID_ARGUMENT if it is not a regular file (a directory, device or FIFO is never
 * read); MLPT_RESOURCE_EXHAUSTED if it is larger than the runtime's read limit. Never reads more
 * than that limit (plus one byte) into the host, whatever the sandbox's contents.
 * [checked: read_file_bounded] */
typedef struct mlpt_sandbox_read_file_args {
  size_t struct_size;
  mlpt_sandbox* sandbox;
  mlpt_string path;         /* in: absolute path inside the sandbox */
  const mlpt_sink* content; /* in */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_read_file_args;
#define MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_read_file_args, extension_start)
#define MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_read_file_args, content)

/* Creates or replaces a file in the sandbox's writable layer, making parent directories; read_file
 * gives back the same bytes. [checked: files_round_trip] */
typedef struct mlpt_sandbox_write_file_args {
  size_t struct_size;
  mlpt_sandbox* sandbox;
  mlpt_string path;     /* in: absolute path inside the sandbox */
  mlpt_string content;  /* in */
  uint32_t mode;        /* in: permission bits, e.g. 0644 */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_write_file_args;
#define MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_write_file_args, extension_start)
#define MLPT_SANDBOX_WRITE_FILE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_write_file_args, mode)

/* ---- The table ------------------------------------------------------------------------------- */

typedef struct mlpt_sandbox_api {
  size_t struct_size;
  mlpt_error* (*runtime_create)(mlpt_sandbox_runtime_create_args* args);
  /* Destroys the runtime; every sandbox must be destroyed first. NULL is a no-op. */
  void (*runtime_destroy)(mlpt_sandbox_runtime* runtime);

  /* Thread-safe. */
  mlpt_error* (*create)(mlpt_sandbox_create_args* args);
  /* Kills everything still running inside, removes the writable layer and every mount and temp
   * directory. Thread-safe with respect to other sandboxes. NULL is a no-op.
   * [checked: null_destroy_is_noop] */
  void (*destroy)(mlpt_sandbox* sandbox);

  mlpt_error* (*exec)(mlpt_sandbox_exec_args* args);
  mlpt_error* (*read_file)(mlpt_sandbox_read_file_args* args);
  mlpt_error* (*write_file)(mlpt_sandbox_write_file_args* args);
  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_sandbox_api;
#define MLPT_SANDBOX_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_api, extension_start)
#define MLPT_SANDBOX_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_sandbox_api, write_file)

/* What the host passes to a harness or reward so that it can use the sandbox component without
 * knowing which plugin provides it. Borrowed: lives as long as the object it was given to. */
typedef struct mlpt_sandbox_binding {
  size_t struct_size;
  const mlpt_sandbox_api* api;
  const mlpt_error_api* errors;   /* destroys errors returned by `api` */
  mlpt_sandbox_runtime* runtime;
} mlpt_sandbox_binding;
#define MLPT_SANDBOX_BINDING_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sandbox_binding, runtime)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_SANDBOX_H_ */
