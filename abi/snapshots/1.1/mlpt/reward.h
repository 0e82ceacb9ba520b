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
} mlpt_reward_create_args;
#define MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_reward_create_args, reward)

/* ---- Grading --------------------------------------------------------------------------------- */

/* Flags on a reward that cannot be trusted (docs/benchmark.md §4). */
#define MLPT_REWARD_FLAG_HIT_LIMIT 0x1u     /* passed, but the agent hit max turns or context */
#define MLPT_REWARD_FLAG_TEST_TIMEOUT 0x2u  /* the hidden test run timed out */
#define MLPT_REWARD_FLAG_AGENT_TIMEOUT 0x4u /* the agent wall-clock limit cut the rollout */

typedef struct mlpt_grade_args {
  size_t struct_size;
  mlpt_reward* reward;
  mlpt_string task_json;   /* in: the dataset record */
  mlpt_string result_json; /* in: the harness's episode result (patch, answer, ...) */
  int32_t episode_end;     /* in: an mlpt_episode_end value (harness.h) */
  const mlpt_sandbox_binding* binding; /* in: NULL when needs_sandbox is 0 */
  /* in: receives {"reason": str, "tests": {name: status}, ...} for people and logs; may be NULL */
  const mlpt_sink* details;
  double out_reward;       /* out */
  uint32_t out_flags;      /* out: MLPT_REWARD_FLAG_* */
} mlpt_grade_args;
#define MLPT_GRADE_ARGS_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_grade_args, out_flags)

/* ---- The table ------------------------------------------------------------------------------- */

/* grade is thread-safe: many rollouts are graded at once. A rollout that simply fails (empty patch,
 * patch does not apply, tests fail) is reward 0 with a reason, not an error; errors are for the
 * grader itself failing (bad task record, sandbox could not be created). */
typedef struct mlpt_reward_api {
  size_t struct_size;
  mlpt_error* (*create)(mlpt_reward_create_args* args);
  void (*destroy)(mlpt_reward* reward); /* NULL is a no-op */
  mlpt_error* (*grade)(mlpt_grade_args* args);
} mlpt_reward_api;
#define MLPT_REWARD_API_STRUCT_SIZE MLPT_STRUCT_SIZE(mlpt_reward_api, grade)

#ifdef __cplusplus
}
#endif

#endif /* MLPT_REWARD_H_ */
