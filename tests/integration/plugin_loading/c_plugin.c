/* A complete plugin in plain C11, no SDK: proves the ABI needs nothing from C++.
 * Component: reward "nonempty_patch" — 1.0 when the harness result JSON has a non-empty "patch".
 *
 * Built once as a correct plugin and, with MLPT_TEST_DEFECT=N, as deliberately broken variants that
 * the loader must reject (or accept) with a clear message; see loader_test.cpp for the list. */
#include <stdlib.h>
#include <string.h>

#include "mlpt/mlpt.h"
#include "mlpt/reward.h"

#ifndef MLPT_TEST_DEFECT
#define MLPT_TEST_DEFECT 0
#endif

struct mlpt_error {
  mlpt_error_code code;
  char message[128];
};

static mlpt_error* make_error(mlpt_error_code code, const char* message) {
  mlpt_error* e = (mlpt_error*)calloc(1, sizeof(mlpt_error));
  if (!e) return NULL;
  e->code = code;
  strncpy(e->message, message, sizeof(e->message) - 1);
  return e;
}
static void error_destroy(mlpt_error* e) { free(e); }
static mlpt_error_code error_code(const mlpt_error* e) { return e->code; }
static mlpt_string error_message(const mlpt_error* e) {
  mlpt_string s = {e->message, strlen(e->message)};
  return s;
}

struct mlpt_reward {
  int grades;
};

static mlpt_error* reward_create(mlpt_reward_create_args* args) {
  if (args->config_json.size > 2) return make_error(MLPT_INVALID_ARGUMENT, "nonempty_patch takes no settings");
  args->reward = (mlpt_reward*)calloc(1, sizeof(mlpt_reward));
  return args->reward ? NULL : make_error(MLPT_RESOURCE_EXHAUSTED, "out of memory");
}
static void reward_destroy(mlpt_reward* reward) { free(reward); }

static mlpt_error* reward_grade(mlpt_grade_args* args) {
  static const char key[] = "\"patch\": \"";
  const char* r = args->result_json.data;
  size_t n = args->result_json.size, k = sizeof(key) - 1;
  args->out_reward = 0.0;
  args->out_flags = 0;
  for (size_t i = 0; r && i + k < n; ++i) {
    if (memcmp(r + i, key, k) == 0) {
      args->out_reward = r[i + k] != '"' ? 1.0 : 0.0;
      break;
    }
  }
  args->reward->grades++;
  return NULL;
}

static const mlpt_reward_api kRewardApi = {
    MLPT_REWARD_API_STRUCT_SIZE, reward_create, reward_destroy,
#if MLPT_TEST_DEFECT == 4 /* a required function missing */
    NULL,
#else
    reward_grade,
#endif
};
static const mlpt_reward_capabilities kRewardCaps = {
#if MLPT_TEST_DEFECT == 10 /* implausible capabilities size */
    0,
#else
    MLPT_REWARD_CAPABILITIES_STRUCT_SIZE,
#endif
    0, 1};

#define STR(s) {s, sizeof(s) - 1}
static const mlpt_component kComponents[] = {
    {MLPT_COMPONENT_STRUCT_SIZE, MLPT_COMPONENT_REWARD,
#if MLPT_TEST_DEFECT == 5 /* two components with one name */
     STR("dup"),
#else
     STR("nonempty_patch"),
#endif
     STR("1.0 when the rollout produced a non-empty patch"),
#if MLPT_TEST_DEFECT == 11 /* no function table */
     NULL,
#else
     &kRewardApi,
#endif
     &kRewardCaps},
#if MLPT_TEST_DEFECT == 5
    {MLPT_COMPONENT_STRUCT_SIZE, MLPT_COMPONENT_REWARD, STR("dup"), STR("the same name again"), &kRewardApi, &kRewardCaps},
#endif
};

static const mlpt_host_services* g_host;

#if MLPT_TEST_DEFECT == 13 /* not a defect: an extension chain of entries no host knows */
static const mlpt_extension kUnknownLast = {MLPT_EXTENSION_STRUCT_SIZE, (mlpt_extension_type)0x7fff0002, NULL};
static const mlpt_extension kUnknownFirst = {MLPT_EXTENSION_STRUCT_SIZE, (mlpt_extension_type)0x7fff0001, &kUnknownLast};
#endif

static mlpt_plugin_descriptor kDescriptor = {
#if MLPT_TEST_DEFECT == 7 /* a struct size no ABI version ever had */
    8,
#elif MLPT_TEST_DEFECT == 9 /* built against ABI 1.0: the descriptor ends before build_info */
    MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0,
#else
    MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE,
#endif
#if MLPT_TEST_DEFECT == 2
    {2, 0},
#elif MLPT_TEST_DEFECT == 3
    {MLPT_ABI_VERSION_MAJOR, 99},
#elif MLPT_TEST_DEFECT == 9
    {1, 0},
#else
    {MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR},
#endif
    STR("c-plugin"), STR("1.0.0"), sizeof(kComponents) / sizeof(kComponents[0]), kComponents,
    {MLPT_ERROR_API_STRUCT_SIZE, error_destroy, error_code, error_message},
    NULL,
#if MLPT_TEST_DEFECT != 9
    STR("plain C11"),
#endif
#if MLPT_TEST_DEFECT == 13
    &kUnknownFirst,
#endif
};

#if MLPT_TEST_DEFECT == 12 /* an unresolved symbol: dlopen(RTLD_NOW) must fail */
extern int mlpt_test_symbol_nobody_defines(void);
#endif

#if MLPT_TEST_DEFECT == 1 /* exports the wrong symbol */
MLPT_EXPORT mlpt_error* mlpt_plugin_init_v0(mlpt_plugin_init_args* args) {
#else
MLPT_EXPORT mlpt_error* mlpt_plugin_init(mlpt_plugin_init_args* args) {
#endif
  g_host = args->host;
#if MLPT_TEST_DEFECT == 12
  if (mlpt_test_symbol_nobody_defines()) return NULL;
#endif
#if MLPT_TEST_DEFECT == 6 /* refuses the host, saying why */
  {
    static const char why[] = "this plugin needs a host with GPUs";
    mlpt_string src = STR("c-plugin"), msg = {why, sizeof(why) - 1};
    g_host->log(g_host->ctx, MLPT_LOG_ERROR, src, msg);
    args->descriptor = NULL;
    return NULL;
  }
#endif
#if MLPT_TEST_DEFECT == 14 /* refuses the host the 1.2 way: an error, and a descriptor to destroy it */
  args->descriptor = &kDescriptor;
  return make_error(MLPT_FAILED_PRECONDITION, "this plugin needs a host with GPUs");
#endif
#if MLPT_TEST_DEFECT == 8 /* fails in its entry point */
  args->descriptor = &kDescriptor;
  return make_error(MLPT_UNAVAILABLE, "license server unreachable");
#endif
  if (args->host_abi_version.major != MLPT_ABI_VERSION_MAJOR) return NULL;
  args->descriptor = &kDescriptor;
  return NULL;
}
