/* engine.h: the inference engine component (MLPT_COMPONENT_ENGINE).
 *
 * The engine generates tokens for rollouts. The host owns every rollout's token sequence
 * (token-in, token-out): it sends token ids and gets token ids back, with the logprob of each
 * sampled token under the weights that sampled it, and optionally the experts each MoE layer routed
 * every token to (Rollout Routing Replay). Many rollouts are in flight at once: `generate` is called
 * concurrently from many host threads and the engine batches them (continuous batching).
 *
 * Sections: Capabilities, Engine lifetime, Generation, Sessions, Weights, Pause/resume, The table.
 */
#ifndef MLPT_ENGINE_H_
#define MLPT_ENGINE_H_

#include "mlpt/mlpt.h"

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
} mlpt_engine_create_args;
#define MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_create_args, engine)

/* Facts about the loaded model that the host needs to size buffers. */
typedef struct mlpt_engine_model_info {
  size_t struct_size;
  int64_t vocab_size;       /* out: rows of the LM head, padding included */
  int64_t num_moe_layers;   /* out: layers that route (0 for a dense model) */
  int64_t experts_per_token; /* out: top-k of each MoE layer */
  int64_t max_sequence_length; /* out: the longest sequence the engine accepts */
  uint64_t weight_version;  /* out: version of the weights now loaded (0 = initial checkpoint) */
} mlpt_engine_model_info;
#define MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_model_info, weight_version)

/* ---- Generation ------------------------------------------------------------------------------ */

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

typedef struct mlpt_cancel_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t request_id; /* in: a request in flight; an unknown or finished id is not an error */
} mlpt_cancel_args;
#define MLPT_CANCEL_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_cancel_args, request_id)

/* ---- Sessions -------------------------------------------------------------------------------- */

typedef struct mlpt_session_release_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t session_id; /* in: an unknown id is not an error */
} mlpt_session_release_args;
#define MLPT_SESSION_RELEASE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_session_release_args, session_id)

/* ---- Weights --------------------------------------------------------------------------------- */

/* Replaces the weights. The tensors are borrowed for the call: the engine copies (or converts) what
 * it keeps. Every tensor the engine needs must be present with the shape of the model; a missing,
 * extra or misshapen tensor is MLPT_INVALID_ARGUMENT and leaves the old weights in place.
 * Must be called while paused (or before the first generate). */
typedef struct mlpt_load_weights_args {
  size_t struct_size;
  mlpt_engine* engine;
  uint64_t version;                 /* in: greater than the version now loaded */
  const mlpt_named_tensor* tensors; /* in */
  size_t num_tensors;               /* in */
} mlpt_load_weights_args;
#define MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_load_weights_args, num_tensors)

/* ---- The table ------------------------------------------------------------------------------- */

typedef struct mlpt_engine_api {
  size_t struct_size;

  /* Loads the model named by the config. Thread-safe. */
  mlpt_error* (*create)(mlpt_engine_create_args* args);
  /* Destroys the engine; no call may be in flight. NULL is a no-op. */
  void (*destroy)(mlpt_engine* engine);
  /* Fills `info`. Thread-safe. */
  mlpt_error* (*model_info)(mlpt_engine* engine, mlpt_engine_model_info* info);

  /* Generates; blocks until the request finishes. Thread-safe: concurrent calls are batched.
   * While paused, a new call waits for resume (or cancellation). */
  mlpt_error* (*generate)(mlpt_generate_args* args);
  /* Stops a request in flight; its generate returns MLPT_FINISH_CANCELLED. Thread-safe. */
  mlpt_error* (*cancel)(mlpt_cancel_args* args);
  /* Drops a session's cached state. Thread-safe; not while that session is generating. */
  mlpt_error* (*session_release)(mlpt_session_release_args* args);

  /* Pause: new generate calls wait; returns once no generation is running. Resume: lets them go.
   * Thread-safe. Pause/resume do not nest. */
  mlpt_error* (*pause)(mlpt_engine* engine);
  mlpt_error* (*resume)(mlpt_engine* engine);
  /* Replaces the weights (see above). Not thread-safe with generate; call while paused. */
  mlpt_error* (*load_weights)(mlpt_load_weights_args* args);
} mlpt_engine_api;
#define MLPT_ENGINE_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_engine_api, load_weights)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_ENGINE_H_ */
