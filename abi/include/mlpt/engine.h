/* engine.h: the inference engine component (MLPT_COMPONENT_ENGINE).
 *
 * The engine generates tokens for rollouts. The host owns every rollout's token sequence
 * (token-in, token-out): it sends token ids and gets token ids back, with the logprob of each
 * sampled token under the weights that sampled it, and optionally the experts each MoE layer routed
 * every token to (Rollout Routing Replay). Many rollouts are in flight at once and the engine
 * batches them (continuous batching).
 *
 * Two ways to generate:
 *   - Since 1.2, asynchronous requests: `submit` queues a request and returns at once; the request
 *     completes through a callback (`on_ready`), a poll (`request_is_ready`) or a wait
 *     (`request_await`), like a PJRT_Event. Its result is owned by the engine, sized by what was
 *     generated, and freed by `request_release`. Hundreds of requests in flight need no host thread
 *     each. A 1.2 engine provides both ways.
 *   - 1.0 and 1.1: `generate` blocks the calling thread until the request finishes, and the caller
 *     provides output buffers sized for the worst case. A 1.2 host drives such an engine by calling
 *     `generate` from a small pool of its own threads.
 *
 * Sections: Capabilities, Engine lifetime, Engine groups, Generation (blocking), Generation
 * (asynchronous), Sessions, Weights, Pause/resume, The table.
 */
#ifndef MLPT_ENGINE_H_
#define MLPT_ENGINE_H_

#include "mlpt/mlpt.h"
#include "mlpt/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Capabilities ---------------------------------------------------------------------------- */

typedef struct mlpt_engine_capabilities {
  size_t struct_size;
  int returns_logprobs;       /* nonzero: out_logprobs is filled for every generated token */
  int returns_routed_experts; /* nonzero: routed experts can be recorded (R3) */
  int keeps_sessions;         /* nonzero: a session's cache survives between generate calls */
  int supports_cancel;        /* nonzero: `cancel` stops a running request promptly */
  int deterministic_seed;     /* nonzero: the same request with the same seed gives the same tokens */
} mlpt_engine_capabilities;
#define MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_engine_capabilities, deterministic_seed)

/* ---- Engine lifetime ------------------------------------------------------------------------- */

typedef struct mlpt_engine mlpt_engine; /* opaque */

typedef struct mlpt_engine_create_args {
  size_t struct_size;
  mlpt_string config_json; /* in: the component's settings (e.g. checkpoint path, threads) */
  mlpt_engine* engine;     /* out: destroyed with `destroy` */
  /* Since 1.2 (in): the group this engine is one rank of (see Engine groups). Absent or NULL: a
   * group of one. An engine that cannot run as a group refuses a group of several ranks. */
  const mlpt_component_group* component_group;
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_engine_create_args;
#define MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_create_args, extension_start)
#define MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_engine_create_args, engine)

/* Facts about the loaded model: what the host needs to read results and size batches. */
typedef struct mlpt_engine_model_info {
  size_t struct_size;
  int64_t vocab_size;       /* out: rows of the LM head, padding included */
  int64_t num_moe_layers;   /* out: layers that route (0 for a dense model) */
  int64_t experts_per_token; /* out: top-k of each MoE layer */
  int64_t max_sequence_length; /* out: the longest sequence the engine accepts */
  uint64_t weight_version;  /* out: version of the weights now loaded (0 = initial checkpoint) */
} mlpt_engine_model_info;
#define MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_model_info, weight_version)

/* Since 1.2: the arguments of `query_model_info` (which replaces the 1.0 `model_info`). */
typedef struct mlpt_engine_model_info_args {
  size_t struct_size;
  mlpt_engine* engine;
  /* out: the caller sets out_info.struct_size to the size it knows; the engine fills the fields that
   * fit in it. */
  mlpt_engine_model_info out_info;
} mlpt_engine_model_info_args;
#define MLPT_ENGINE_MODEL_INFO_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_model_info_args, out_info)

/* ---- Engine groups (since 1.2) ---------------------------------------------------------------
 *
 * An engine created with a component_group of size > 1 is one rank of a group that serves as ONE
 * engine: e.g. the tensor- and expert-parallel shards of one model, each rank in its own process,
 * computing every step together. Rank 0 is that engine for the host:
 *   - Requests go to rank 0 only: generate, submit, cancel, the request_* functions and
 *     session_release. The other ranks refuse them with MLPT_FAILED_PRECONDITION [checked: engine_group_requests_to_rank_0]; between create
 *     and destroy they serve rank 0 from inside the plugin (they run their part of every step rank
 *     0 runs, on threads of their own), so their hosts need not call anything to keep them going.
 *   - create is collective (mlpt.h, Component groups): each rank's create returns once the group
 *     has met; it fails on every rank when it fails on one after the meeting.
 *     [checked: engine_group_all_or_none]
 *   - destroy is collective: a rank other than 0 returns once rank 0 has been destroyed.
 *   - load_weights and fetch_weights are collective: every rank is called once per load, each with
 *     the version rank 0 is given and its own layout (weight_shards), and rank 0 while paused. A
 *     rank's call returns once every rank has loaded that version, or fails on every rank with the
 *     old weights kept on all (a group never computes with mixed versions); the error names the
 *     first rank that refused and why. The n-th load of every rank belongs to the n-th of rank 0.
 *   - pause_generation, resume_generation (and the 1.0 pause, resume) are per rank: on rank 0 they
 *     mean what they mean for an engine alone; on another rank they only mark it paused or running
 *     (it generates only when rank 0 does), so a host may drive every rank alike.
 *   - query_model_info, model_info and weight_shards are per rank, answered by any rank; the model
 *     info is the same on every rank (weight_version too, once every rank's load has returned).
 *   - A rank that fails while the group computes (halfway through a step) leaves none of the others
 *     waiting for it: the group is broken from then on. The requests of that step fail (with rank
 *     0's own error where rank 0 failed, with MLPT_UNAVAILABLE naming the rank where another did);
 *     every later request on rank 0 and every later load on any rank fail with MLPT_UNAVAILABLE
 *     naming the rank that failed; the other ranks stop serving. Only destroy remains (it waits for no rank that failed). A rank that dies or hangs
 *     without failing is the host's to notice.
 * A host that knows nothing of groups gives none: every engine is then a group of one.
 */

/* ---- Generation (blocking) ------------------------------------------------------------------- */

typedef struct mlpt_sampling_params {
  size_t struct_size;
  float temperature;  /* > 0; the benchmark trains at 1.0 and validates at 0.1 */
  float top_p;        /* (0, 1]; 1.0 disables nucleus filtering */
  int32_t top_k;      /* 0 disables top-k filtering */
  uint64_t seed;      /* per request: the same seed gives the same tokens (see capabilities) */
} mlpt_sampling_params;
#define MLPT_SAMPLING_PARAMS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_sampling_params, seed)

typedef enum mlpt_finish_reason {
  MLPT_FINISH_STOP = 1,      /* a stop token was sampled; it is the last token returned */
  MLPT_FINISH_LENGTH = 2,    /* max_new_tokens or the sequence limit was reached */
  MLPT_FINISH_CANCELLED = 3, /* `cancel` or host cancellation; tokens so far are returned */
} mlpt_finish_reason;

/* One generation request. All input arrays are borrowed for the call. Output arrays are provided by
 * the caller with the capacity stated beside each; the engine never writes past it. */
typedef struct mlpt_generate_args {
  size_t struct_size;
  mlpt_engine* engine;

  /* in: the caller's id for this request, unique among requests in flight; `cancel` names it. */
  uint64_t request_id;

  /* in: 0 for a one-off request; otherwise a session id chosen by the caller. With a session the
   * engine keeps the sequence's state after the call, so the next call of the same session (whose
   * `tokens` must extend this call's tokens plus the tokens generated) only prefills the new
   * suffix. A call whose tokens do not extend the cached ones is still correct: the engine
   * re-prefills. At most one call per session at a time. */
  uint64_t session_id;

  const int32_t* tokens; /* in: the whole sequence so far (prompt and earlier turns) */
  size_t num_tokens;     /* in: >= 1 */

  mlpt_sampling_params sampling; /* in */
  int32_t max_new_tokens;        /* in: >= 1 */
  const int32_t* stop_tokens;    /* in: generation ends after sampling any of these */
  size_t num_stop_tokens;        /* in */

  /* in: nonzero to record routed experts (requires capabilities.returns_routed_experts). */
  int record_routed_experts;
  /* in: the first position whose routing is returned (usually the length already known to the
   * caller). Positions [routed_experts_from, num_tokens + out_num_tokens) are written. */
  size_t routed_experts_from;

  int32_t* out_tokens;   /* out: capacity max_new_tokens */
  float* out_logprobs;   /* out: capacity max_new_tokens; may be NULL if not wanted */
  /* out: capacity (num_tokens + max_new_tokens - routed_experts_from) * num_moe_layers *
   * experts_per_token, laid out [position][layer][k]; NULL unless record_routed_experts. */
  int16_t* out_routed_experts;

  size_t out_num_tokens;          /* out: tokens written to out_tokens */
  mlpt_finish_reason out_finish_reason; /* out */
  uint64_t out_weight_version;    /* out: the weights every returned token was sampled with */
} mlpt_generate_args;
#define MLPT_GENERATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_generate_args, out_weight_version)

/* Cancels a request in flight, blocking (`generate`) or submitted (`submit`): it finishes promptly
 * with MLPT_FINISH_CANCELLED and the tokens generated so far (when capabilities.supports_cancel;
 * otherwise it may run to its end). */
typedef struct mlpt_cancel_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t request_id; /* in: a request in flight; an unknown or finished id is not an error */
} mlpt_cancel_args;
#define MLPT_CANCEL_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_cancel_args, request_id)

/* ---- Generation (asynchronous, since 1.2) ----------------------------------------------------
 *
 * A request's life: `submit` -> (engine works; the host's thread is free) -> ready -> the host
 * reads the result (`request_result`) -> `request_release`. "Ready" means finished for good:
 * stopped, reached its length, cancelled, or failed. Every submitted request becomes ready, also
 * when it is cancelled or the engine fails, and every submitted request must be released exactly
 * once, after it is ready (releasing is the host's only obligation; the engine frees the request
 * and its result then, not before). [checked: concurrent_requests_complete]
 *
 * Notification, as PJRT_Event: a request can be polled (`request_is_ready`), waited for
 * (`request_await`) and carries one callback given at submission (`on_ready`). The callback:
 *   - is called exactly once, when the request becomes ready, on a thread of the engine's choosing:
 *     an engine thread, or the submitting thread before `submit` returns (a request that finishes
 *     at once, e.g. from a cache);
 *   - must return promptly and must not block: no `request_await` of another request, no `pause`,
 *     no long computation (the engine's progress may depend on the thread it runs on). It may call
 *     `request_result`, `request_release` (of its own request), `cancel` and `submit`;
 *   - is called with no engine lock held, so those calls do not deadlock;
 *   - when it releases its request, the request is gone once the release returns; otherwise the
 *     request lives until another thread releases it (the engine keeps what the running callback
 *     uses alive until it returns, so a release racing with the callback is safe).
 */

typedef struct mlpt_engine_request mlpt_engine_request; /* opaque: one submitted request */

/* `user_data` is the submitter's `on_ready_user_data`; `request` is the request that became ready. */
typedef void (*mlpt_request_ready_fn)(void* user_data, mlpt_engine_request* request);

/* Submits one generation request; returns without waiting for it. The inputs mean what they mean in
 * mlpt_generate_args and are copied by `submit` (all borrowed for the call). A request the engine
 * refuses at once (invalid tokens, a busy session, a duplicate request_id) is an error returned by
 * `submit`: then no request exists and on_ready is never called. While paused the request is
 * accepted and queued; it starts after `resume` (or finishes when cancelled). */
typedef struct mlpt_submit_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t request_id;           /* in: unique among requests in flight; `cancel` names it */
  uint64_t session_id;           /* in: 0, or a session as in mlpt_generate_args */
  const int32_t* tokens;         /* in: the whole sequence so far */
  size_t num_tokens;             /* in: >= 1 */
  mlpt_sampling_params sampling; /* in */
  int32_t max_new_tokens;        /* in: >= 1; costs nothing until generated */
  const int32_t* stop_tokens;    /* in */
  size_t num_stop_tokens;        /* in */
  int record_routed_experts;     /* in: nonzero to record (requires capabilities.returns_routed_experts) */
  size_t routed_experts_from;    /* in: the first position whose routing the result holds (<= num_tokens) */
  mlpt_request_ready_fn on_ready; /* in: may be NULL (then poll or await) */
  void* on_ready_user_data;      /* in: passed to on_ready, never dereferenced by the engine */
  mlpt_engine_request* out_request; /* out: valid until request_release */
} mlpt_submit_args;
#define MLPT_SUBMIT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_submit_args, out_request)

/* Polls: out_ready is nonzero once the request is ready. Never blocks. */
typedef struct mlpt_request_is_ready_args {
  size_t struct_size;
  mlpt_engine* engine;
  mlpt_engine_request* request; /* in */
  int out_ready;                /* out */
} mlpt_request_is_ready_args;
#define MLPT_REQUEST_IS_READY_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_request_is_ready_args, out_ready)

/* Blocks the calling thread until the request is ready; returns NULL then (the request's own
 * failure is reported by `request_result`, not here). Any number of threads may wait on one
 * request. Must not be called from an on_ready callback for another request. */
typedef struct mlpt_request_await_args {
  size_t struct_size;
  mlpt_engine* engine;
  mlpt_engine_request* request; /* in */
} mlpt_request_await_args;
#define MLPT_REQUEST_AWAIT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_request_await_args, request)

/* Reads the result of a ready request. Returns MLPT_FAILED_PRECONDITION when it is not ready yet,
 * and the request's own error (a new error object on every call, owned by the caller) when it
 * failed; the out fields are then unspecified. Every pointer handed out is owned by the engine and
 * stays valid and unchanged until the request is released. May be called any number of times.
 *
 * Routed experts (only when recorded) are laid out per MoE layer: out_routed_experts[layer] for
 * layer in [0, num_moe_layers) points to out_num_routed_positions * experts_per_token int16 expert
 * ids in [position][k] order, for the positions [routed_experts_from, num_tokens + out_num_tokens):
 * exactly what was asked and generated, never a worst-case capacity. A position the engine never
 * computed (a request cancelled mid-prefill) holds -1. */
typedef struct mlpt_request_result_args {
  size_t struct_size;
  mlpt_engine* engine;
  mlpt_engine_request* request;         /* in: a ready request */
  const int32_t* out_tokens;            /* out: out_num_tokens generated tokens */
  size_t out_num_tokens;                /* out: <= max_new_tokens */
  const float* out_logprobs;            /* out: out_num_tokens entries; NULL unless returns_logprobs */
  const int16_t* const* out_routed_experts; /* out: num_moe_layers pointers; NULL unless recorded */
  size_t out_num_routed_positions;      /* out: num_tokens + out_num_tokens - routed_experts_from, or 0 */
  mlpt_finish_reason out_finish_reason; /* out */
  uint64_t out_weight_version;          /* out: the weights every returned token was sampled with */
} mlpt_request_result_args;
#define MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_request_result_args, out_weight_version)

/* Frees a ready request and its result. Returns MLPT_FAILED_PRECONDITION and frees nothing when the
 * request is not ready (cancel it, then release it once ready). */
typedef struct mlpt_request_release_args {
  size_t struct_size;
  mlpt_engine* engine;
  mlpt_engine_request* request; /* in: not used afterwards */
} mlpt_request_release_args;
#define MLPT_REQUEST_RELEASE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_request_release_args, request)

/* ---- Sessions -------------------------------------------------------------------------------- */

typedef struct mlpt_session_release_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t session_id; /* in: an unknown id is not an error */
} mlpt_session_release_args;
#define MLPT_SESSION_RELEASE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_session_release_args, session_id)

/* ---- Weights --------------------------------------------------------------------------------- */

/* Replaces the weights with tensors the caller hands over (a 1.0/1.1 host, `mlpt serve`, the
 * conformance suite; a 1.2 run fetches them plugin to plugin, see fetch_weights). The tensors are
 * borrowed for the call: the engine copies (or converts) what it keeps. Every tensor the engine needs must be present with the shape of the model; a missing,
 * extra or misshapen tensor is MLPT_INVALID_ARGUMENT and leaves the old weights in place.
 * Must be called while paused (or before the first generate).
 *
 * An engine rank that holds only shards of the weights (mlpt.h, mlpt_tensor_shard) says which with
 * `weight_shards`; it is then given exactly those shards, in that order, each with its descriptor
 * in `shards`. Otherwise it is given whole tensors and `shards` is NULL. Collective in an engine
 * group (see Engine groups). */
typedef struct mlpt_load_weights_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t version;                 /* in: greater than the version now loaded */
  const mlpt_named_tensor* tensors; /* in */
  size_t num_tensors;               /* in */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
  /* Since 1.2 (in): parallel to `tensors`, which part of its global tensor each one is; NULL (and
   * absent, from an older host): whole tensors. */
  const mlpt_tensor_shard* shards;
  /* Since 1.2 (in): when the tensors' device data may be read (mlpt.h, Device memory); the engine
   * waits for it before reading. NULL (and absent): ready at the call. */
  const mlpt_device_ready* ready;
} mlpt_load_weights_args;
#define MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_load_weights_args, ready)
#define MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_load_weights_args, num_tensors)

/* The shards of the weights this engine rank holds (see load_weights). `out_tensors` describe them:
 * name, dtype, device and the shard's shape, with `data` NULL; `out_shards` is parallel to it. Both
 * are owned by the engine and live until destroy. */
typedef struct mlpt_weight_shards_args {
  size_t struct_size;
  mlpt_engine* engine;
  const mlpt_named_tensor* out_tensors; /* out */
  const mlpt_tensor_shard* out_shards;  /* out */
  size_t out_num_tensors;               /* out */
  const mlpt_extension* extension_start; /* in: NULL for none */
} mlpt_weight_shards_args;
#define MLPT_WEIGHT_SHARDS_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_weight_shards_args, extension_start)
/* The size of the version that introduced it: the least an engine accepts. */
#define MLPT_WEIGHT_SHARDS_ARGS_STRUCT_SIZE_1_2 MLPT_WEIGHT_SHARDS_ARGS_STRUCT_SIZE

/* Since 1.2: fetches a version >= min_version of the weights through `receiver` (transport.h) and
 * loads it: one `receive` that asks for this rank's layout (the shards weight_shards names, or whole
 * tensors), the load, and the `release` of what was received, all before returning, so the engine
 * keeps no pointer into the transport's (or, zero-copy, the trainer's) memory. What it loads obeys
 * load_weights' rules; on any error the old weights stay in place and the received version is
 * released. Must be called while paused (or before the first request). A failing receive is returned
 * as the engine's error with the transport's code and message. Collective in an engine group, like
 * load_weights (a rank whose receive fails still takes part in the load, and refuses it). */
typedef struct mlpt_fetch_weights_args {
  size_t struct_size;
  mlpt_engine* engine;
  const mlpt_transport_binding* receiver; /* in: a receiver endpoint; borrowed for the call */
  uint64_t min_version;                   /* in: greater than the version now loaded */
  int64_t timeout_ms;                     /* in: passed to the transport's receive */
  const mlpt_extension* extension_start;  /* in: NULL for none */
  uint64_t out_version;                   /* out: the version now loaded */
} mlpt_fetch_weights_args;
#define MLPT_FETCH_WEIGHTS_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_fetch_weights_args, out_version)
/* The size of the version that introduced it: the least an engine accepts. */
#define MLPT_FETCH_WEIGHTS_ARGS_STRUCT_SIZE_1_2 MLPT_FETCH_WEIGHTS_ARGS_STRUCT_SIZE

/* ---- Pause/resume ------------------------------------------------------------------------------
 *
 * Pause: requests not yet started wait (new `generate` calls block, submitted requests queue);
 * returns once no generation is running, so the weights can be replaced. Resume: lets them go.
 * Pause/resume do not nest: pausing a paused engine or resuming a running one is
 * MLPT_FAILED_PRECONDITION. [checked: pause_does_not_nest] Since 1.2 both take args (`pause_generation`, `resume_generation`).
 */
typedef struct mlpt_engine_pause_args {
  size_t struct_size;
  mlpt_engine* engine;
} mlpt_engine_pause_args;
#define MLPT_ENGINE_PAUSE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_pause_args, engine)

typedef struct mlpt_engine_resume_args {
  size_t struct_size;
  mlpt_engine* engine;
} mlpt_engine_resume_args;
#define MLPT_ENGINE_RESUME_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_resume_args, engine)

/* ---- The table ------------------------------------------------------------------------------- */

typedef struct mlpt_engine_api {
  size_t struct_size;

  /* Loads the model named by the config. Thread-safe. */
  mlpt_error* (*create)(mlpt_engine_create_args* args);
  /* Destroys the engine; no call may be in flight and every submitted request must have been
   * released. NULL is a no-op. [checked: null_destroy_is_noop] */
  void (*destroy)(mlpt_engine* engine);
  /* Fills `info`. Thread-safe. Superseded by query_model_info (1.2); a 1.2 host calls this only
   * when the engine's table is older. */
  mlpt_error* (*model_info)(mlpt_engine* engine, mlpt_engine_model_info* info);

  /* Generates; blocks until the request finishes. Thread-safe: concurrent calls are batched.
   * While paused, a new call waits for resume (or cancellation). Kept for 1.0/1.1 hosts; a 1.2
   * host uses `submit` when the table has it. */
  mlpt_error* (*generate)(mlpt_generate_args* args);
  /* Stops a request in flight; its generate returns MLPT_FINISH_CANCELLED. Thread-safe. */
  mlpt_error* (*cancel)(mlpt_cancel_args* args);
  /* Drops a session's cached state. Thread-safe; not while that session is generating. */
  mlpt_error* (*session_release)(mlpt_session_release_args* args);

  /* See Pause/resume. Thread-safe. Superseded by pause_generation/resume_generation (1.2). */
  mlpt_error* (*pause)(mlpt_engine* engine);
  mlpt_error* (*resume)(mlpt_engine* engine);
  /* Replaces the weights (see above). Not thread-safe with generate; call while paused. */
  mlpt_error* (*load_weights)(mlpt_load_weights_args* args);
  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;

  /* ---- Since 1.2: read only when struct_size covers them (MLPT_HAS_FIELD); a 1.2 engine sets
   * every one but weight_shards (and fetch_weights, which the SDK sets). The blocking functions
   * above stay set for older hosts. ---- */

  /* Fills args->out_info. Thread-safe. */
  mlpt_error* (*query_model_info)(mlpt_engine_model_info_args* args);
  /* See Pause/resume. Thread-safe. */
  mlpt_error* (*pause_generation)(mlpt_engine_pause_args* args);
  mlpt_error* (*resume_generation)(mlpt_engine_resume_args* args);
  /* Asynchronous generation (see above). All thread-safe, on any thread, including from on_ready
   * as that section allows; `request_await` blocks, the others return promptly. */
  mlpt_error* (*submit)(mlpt_submit_args* args);
  mlpt_error* (*request_is_ready)(mlpt_request_is_ready_args* args);
  mlpt_error* (*request_await)(mlpt_request_await_args* args);
  mlpt_error* (*request_result)(mlpt_request_result_args* args);
  mlpt_error* (*request_release)(mlpt_request_release_args* args);
  /* Which shards of the weights this rank holds (see Weights). Thread-safe. NULL, or none
   * returned (out_num_tensors 0): the engine takes whole tensors. */
  mlpt_error* (*weight_shards)(mlpt_weight_shards_args* args);
  /* Fetches and loads the weights through a bound receiver (see Weights). Not thread-safe with
   * generation; call while paused. NULL: the host receives and calls load_weights itself. */
  mlpt_error* (*fetch_weights)(mlpt_fetch_weights_args* args);
} mlpt_engine_api;
#define MLPT_ENGINE_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_api, fetch_weights)
/* The table of ABI 1.0, unchanged in 1.1: the least a host accepts. */
#define MLPT_ENGINE_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_engine_api, load_weights)
#define MLPT_ENGINE_API_STRUCT_SIZE_1_1 MLPT_ENGINE_API_STRUCT_SIZE_1_0

#ifdef __cplusplus
}
#endif

#endif /* MLPT_ENGINE_H_ */
