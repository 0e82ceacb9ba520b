/* harness.h: the agent harness component (MLPT_COMPONENT_HARNESS).
 *
 * The harness is the agent's side of a rollout minus the model: it writes the first messages (system
 * prompt, the task as a user message, the tool schemas), executes the tool calls the model makes
 * inside the rollout's sandbox, and turns results into messages. The host owns the token sequence:
 * it renders messages with the model's chat format, generates with the engine, parses the reply into
 * tool calls, and hands the parsed reply to `episode_step`. Turn and context limits are the host's
 * (it knows the tokens); the harness is told why an episode ended when it extracts the result.
 *
 * Messages and replies are JSON (UTF-8), so every harness speaks one vocabulary:
 *   message    {"role": "system"|"user"|"assistant"|"tool", "content": str,
 *               "name": str (tool messages: the tool), "tool_calls": [call] (assistant only)}
 *   call       {"name": str, "arguments": {...}}
 *   reply      {"content": str, "tool_calls": [call], "parse_errors": [str]}
 *               (parse_errors: calls the host could not parse, each a message for the model)
 *
 * Sections: Capabilities, Harness lifetime, Episodes, The table.
 */
#ifndef MLPT_HARNESS_H_
#define MLPT_HARNESS_H_

#include "mlpt/mlpt.h"
#include "mlpt/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Capabilities ---------------------------------------------------------------------------- */

typedef struct mlpt_harness_capabilities {
  size_t struct_size;
  int needs_sandbox;  /* nonzero: episodes need a sandbox (the host creates it from the task) */
  int produces_patch; /* nonzero: the episode result carries a git patch */
} mlpt_harness_capabilities;
#define MLPT_HARNESS_CAPABILITIES_STRUCT_SIZE \
  MLPT_STRUCT_SIZE(mlpt_harness_capabilities, produces_patch)

/* ---- Harness lifetime ------------------------------------------------------------------------ */

typedef struct mlpt_harness mlpt_harness;         /* opaque */
typedef struct mlpt_harness_episode mlpt_harness_episode; /* opaque: one rollout */

typedef struct mlpt_harness_create_args {
  size_t struct_size;
  mlpt_string config_json; /* in: e.g. command timeouts, output caps */
  mlpt_harness* harness;   /* out: destroyed with `destroy` */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_harness_create_args;
#define MLPT_HARNESS_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_harness_create_args, extension_start)
#define MLPT_HARNESS_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_harness_create_args, harness)

/* ---- Episodes -------------------------------------------------------------------------------- */

/* Starts a rollout of `task_json` (one dataset record; the host adds the object "mlpt_limits" with
 * the run's limits: "command_timeout_s" (one command at most; the harness enforces it and tells the
 * model), "test_timeout_s", "agent_timeout_s", in seconds; a harness may ignore what it does not
 * use, and takes its own defaults when the object is absent). `sandbox` is the rollout's sandbox, created
 * by the host from the task's image, borrowed until episode_destroy; NULL when the capability says
 * none is needed. Writes {"messages": [message...], "tools": [json schema...]} to `out`.
 * [checked: start_messages_and_tools] */
typedef struct mlpt_episode_start_args {
  size_t struct_size;
  mlpt_harness* harness;
  mlpt_string task_json;                 /* in */
  const mlpt_sandbox_binding* binding;   /* in: may be NULL with sandbox */
  mlpt_sandbox* sandbox;                 /* in */
  const mlpt_sink* out;                  /* in */
  mlpt_harness_episode* episode;         /* out: destroyed with episode_destroy */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_episode_start_args;
#define MLPT_EPISODE_START_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_episode_start_args, extension_start)
#define MLPT_EPISODE_START_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_episode_start_args, episode)

/* One agent turn: `reply_json` is the model's parsed reply (see the vocabulary above). The harness
 * executes its tool calls in order and writes {"messages": [message...], "done": bool,
 * "finish_reason": str} to `out`: tool results (or an error observation for a garbled or unknown
 * call, or the continue nudge when the reply had no call), and done = true after `finish` [checked: finish_ends_episode].
 * A failing tool never fails the call: errors inside the episode are observations.
 * [checked: tool_errors_are_observations] */
typedef struct mlpt_episode_step_args {
  size_t struct_size;
  mlpt_harness_episode* episode;
  mlpt_string reply_json; /* in */
  const mlpt_sink* out;   /* in */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_episode_step_args;
#define MLPT_EPISODE_STEP_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_episode_step_args, extension_start)
#define MLPT_EPISODE_STEP_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_episode_step_args, out)

/* Why the host ended an episode. */
typedef enum mlpt_episode_end {
  MLPT_EPISODE_FINISHED = 1,    /* the agent called finish */
  MLPT_EPISODE_MAX_TURNS = 2,   /* the turn limit (30 in the benchmark) */
  MLPT_EPISODE_MAX_CONTEXT = 3, /* the context limit (65536 tokens) */
  MLPT_EPISODE_TIMEOUT = 4,     /* the agent wall-clock limit (not a valid sample) */
  MLPT_EPISODE_ERROR = 5,       /* the host failed (engine error, cancellation) */
} mlpt_episode_end;

/* The name of an episode end as hosts and harnesses write it in JSON ("finished", "max_turns",
 * "max_context", "timeout", "error"; "unknown" for any other value). The string is static. */
static inline const char* mlpt_episode_end_name(mlpt_episode_end end) {
  switch (end) {
    case MLPT_EPISODE_FINISHED: return "finished";
    case MLPT_EPISODE_MAX_TURNS: return "max_turns";
    case MLPT_EPISODE_MAX_CONTEXT: return "max_context";
    case MLPT_EPISODE_TIMEOUT: return "timeout";
    case MLPT_EPISODE_ERROR: return "error";
  }
  return "unknown";
}

/* Ends the episode and writes its result JSON to `out`: {"patch": str (for produces_patch: the
 * diff of the working tree against the task's base commit, binary diffs dropped), "answer": str
 * (the last message or finish text), ...}. Works however the episode ended. */
typedef struct mlpt_episode_finish_args {
  size_t struct_size;
  mlpt_harness_episode* episode;
  mlpt_episode_end end;  /* in */
  const mlpt_sink* out;  /* in */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_episode_finish_args;
#define MLPT_EPISODE_FINISH_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_episode_finish_args, extension_start)
#define MLPT_EPISODE_FINISH_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_episode_finish_args, out)

/* ---- The table ------------------------------------------------------------------------------- */

/* create/destroy and episode_start are thread-safe; calls on one episode are serialised by the
 * caller; different episodes run concurrently. */
typedef struct mlpt_harness_api {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_harness_create_args* args);
  /* After every episode is destroyed; NULL is a no-op [checked: null_destroy_is_noop]. */
  void (*destroy)(mlpt_harness* harness);
  mlpt_error* (*episode_start)(mlpt_episode_start_args* args);
  mlpt_error* (*episode_step)(mlpt_episode_step_args* args);
  mlpt_error* (*episode_finish)(mlpt_episode_finish_args* args);
  void (*episode_destroy)(mlpt_harness_episode* episode); /* NULL is a no-op */
  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_harness_api;
#define MLPT_HARNESS_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_harness_api, extension_start)
#define MLPT_HARNESS_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_harness_api, episode_destroy)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_HARNESS_H_ */
