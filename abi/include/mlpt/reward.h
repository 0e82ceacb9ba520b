/* reward.h: the reward component (MLPT_COMPONENT_REWARD).
 *
 * Grades one finished rollout. For the benchmark (R2E-Gym hidden tests) the reward creates a fresh
 * sandbox from the task's image through the binding the host passes, applies the rollout's patch,
 * restores and runs the hidden tests, and compares their statuses with the task's expectation:
 * 1.0 or 0.0. Rewards that cannot be trusted are flagged, not hidden.
 *
 * Sections: Capabilities, Reward lifetime, Grading, The table.
 */
#ifndef MLPT_REWARD_H_
#define MLPT_REWARD_H_

#include "mlpt/harness.h"
#include "mlpt/mlpt.h"
#include "mlpt/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Capabilities ---------------------------------------------------------------------------- */

typedef struct mlpt_reward_capabilities {
  size_t struct_size;
  int needs_sandbox; /* nonzero: grade needs `binding` */
  int binary;        /* nonzero: rewards are exactly 0.0 or 1.0 */
} mlpt_reward_capabilities;
#define MLPT_REWARD_CAPABILITIES_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_reward_capabilities, binary)

/* ---- Reward lifetime ------------------------------------------------------------------------- */

typedef struct mlpt_reward mlpt_reward; /* opaque */

typedef struct mlpt_reward_create_args {
  size_t struct_size;
  mlpt_string config_json; /* in: e.g. test timeout, image directory */
  mlpt_reward* reward;     /* out: destroyed with `destroy` */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_reward_create_args;
#define MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_reward_create_args, extension_start)
#define MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_reward_create_args, reward)

/* ---- Grading --------------------------------------------------------------------------------- */

/* Flags on a reward that cannot be trusted (docs/benchmark.md §4). */
#define MLPT_REWARD_FLAG_HIT_LIMIT 0x1u     /* passed, but the agent hit max turns or context */
#define MLPT_REWARD_FLAG_TEST_TIMEOUT 0x2u  /* the hidden test run timed out */
#define MLPT_REWARD_FLAG_AGENT_TIMEOUT 0x4u /* the agent wall-clock limit cut the rollout */
/* The test output could not be trusted (cut at the output limit, not exactly one summary block at
 * its end, counts and exit status that disagree, or, for a grader that supervises the test run, a
 * result record that is missing, forged or disagrees with the summary); the reward is 0. */
#define MLPT_REWARD_FLAG_OUTPUT_UNTRUSTED 0x8u
/* The patch changes what the grading relies on in-process (the test runner, the import machinery,
 * the call stack, interpreter start-up hooks); the reward stands but is marked for review. */
#define MLPT_REWARD_FLAG_TAMPER_SUSPECT 0x10u

typedef struct mlpt_grade_args {
  size_t struct_size;
  mlpt_reward* reward;
  mlpt_string task_json;   /* in: the dataset record, with the host's "mlpt_limits" (harness.h);
                              "test_timeout_s" there is the hidden-test run's limit for this rollout */
  mlpt_string result_json; /* in: the harness's episode result (patch, answer, ...) */
  /* in: why the episode ended. Typed since 1.2; the layout is that of the int32_t it was before. */
  mlpt_episode_end episode_end;
  const mlpt_sandbox_binding* binding; /* in: NULL when needs_sandbox is 0 */
  /* in: receives {"reason": str, "tests": {name: status}, ...} for people and logs; may be NULL */
  const mlpt_sink* details;
  double out_reward;       /* out */
  uint32_t out_flags;      /* out: MLPT_REWARD_FLAG_* */
  /* Since 1.2 (in). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_grade_args;
#define MLPT_GRADE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_grade_args, extension_start)
#define MLPT_GRADE_ARGS_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_grade_args, out_flags)

/* ---- The table ------------------------------------------------------------------------------- */

/* grade is thread-safe: many rollouts are graded at once. A rollout that simply fails (empty patch,
 * patch does not apply, tests fail) is reward 0 with a reason, not an error
 * [checked: empty_result_scores_0]; errors are for the
 * grader itself failing (bad task record, sandbox could not be created). */
typedef struct mlpt_reward_api {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_reward_create_args* args);
  void (*destroy)(mlpt_reward* reward); /* NULL is a no-op [checked: null_destroy_is_noop] */
  mlpt_error* (*grade)(mlpt_grade_args* args);
  /* Since 1.2 (the plugin's). Absent: no extensions. */
  const mlpt_extension* extension_start;
} mlpt_reward_api;
#define MLPT_REWARD_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_reward_api, extension_start)
#define MLPT_REWARD_API_STRUCT_SIZE_1_0 MLPT_STRUCT_SIZE(mlpt_reward_api, grade)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_REWARD_H_ */
