/* A plain-C plugin built against a frozen header snapshot (abi/snapshots/1.0 or 1.1, chosen by the
 * include path; never the current headers), so the current host is tested against a plugin exactly
 * as an older ABI version saw the boundary.
 *
 * Components:
 *   trainer "sgd4"   four float weights; train_step moves weight j by lr * sum of advantages of the
 *                    sequences whose tokens include j (a toy that gives a checkable result);
 *   transport "mailbox"  one sender, one receiver in one process; receive copies the last send, and
 *                    `release` has the 1.0/1.1 shape (endpoint, version): a host that called it with
 *                    the 1.2 shape would hand it a pointer as the endpoint, which it detects.
 */
#include <stdlib.h>
#include <string.h>

#include "mlpt/mlpt.h"
#include "mlpt/trainer.h"
#include "mlpt/transport.h"

struct mlpt_error {
  mlpt_error_code code;
  char message[160];
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
  mlpt_string s;
  s.data = e->message;
  s.size = strlen(e->message);
  return s;
}

#define STR(s) {s, sizeof(s) - 1}

/* ---- trainer "sgd4" ---- */

struct mlpt_trainer {
  float weights[4];
  int64_t shape[1];
  uint64_t version;
  mlpt_named_tensor exported;
  mlpt_metric metrics[1];
};

static mlpt_error* trainer_create(mlpt_trainer_create_args* args) {
  mlpt_trainer* t = (mlpt_trainer*)calloc(1, sizeof(mlpt_trainer));
  if (!t) return make_error(MLPT_RESOURCE_EXHAUSTED, "out of memory");
  t->shape[0] = 4;
  args->trainer = t;
  return NULL;
}
static void trainer_destroy(mlpt_trainer* t) { free(t); }

static mlpt_error* trainer_step(mlpt_train_step_args* args) {
  static const mlpt_string kLoss = STR("loss");
  const mlpt_train_batch* b = args->batch;
  mlpt_trainer* t = args->trainer;
  size_t i;
  double moved = 0;
  for (i = 0; i < b->num_sequences; ++i) {
    int64_t k;
    for (k = b->offsets[i]; k < b->offsets[i + 1]; ++k) {
      int32_t j = b->tokens[k];
      if (j < 0 || j > 3) return make_error(MLPT_INVALID_ARGUMENT, "sgd4: token ids must be 0..3");
      if (b->loss_mask[k]) {
        t->weights[j] += 0.5f * b->advantages[i];
        moved += 0.5 * b->advantages[i];
      }
    }
  }
  t->version++;
  t->metrics[0].struct_size = MLPT_METRIC_STRUCT_SIZE;
  t->metrics[0].name = kLoss;
  t->metrics[0].value = -moved;
  args->out_metrics = t->metrics;
  args->out_num_metrics = 1;
  args->out_weight_version = t->version;
  return NULL;
}

static mlpt_error* trainer_logprobs(mlpt_compute_logprobs_args* args) {
  int64_t k;
  for (k = 0; k < args->batch->offsets[args->batch->num_sequences]; ++k) args->out_logprobs[k] = 0.0f;
  return NULL;
}

static mlpt_error* trainer_export(mlpt_export_weights_args* args) {
  static const mlpt_string kName = STR("w");
  mlpt_trainer* t = args->trainer;
  memset(&t->exported, 0, sizeof(t->exported));
  t->exported.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
  t->exported.name = kName;
  t->exported.tensor.data = t->weights;
  t->exported.tensor.device.device_type = kDLCPU;
  t->exported.tensor.ndim = 1;
  t->exported.tensor.dtype.code = kDLFloat;
  t->exported.tensor.dtype.bits = 32;
  t->exported.tensor.dtype.lanes = 1;
  t->exported.tensor.shape = t->shape;
  args->out_tensors = &t->exported;
  args->out_num_tensors = 1;
  args->out_weight_version = t->version;
  return NULL;
}

static const mlpt_trainer_api kTrainerApi = {
    MLPT_TRAINER_API_STRUCT_SIZE, trainer_create, trainer_destroy, trainer_step, trainer_logprobs,
    trainer_export, NULL, NULL};
static const mlpt_trainer_capabilities kTrainerCaps = {MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE, 0, 0, kDLCPU};

/* ---- transport "mailbox" ---- */

struct mlpt_transport {
  mlpt_transport_role role;
  uint64_t held; /* receiver: the version it holds, 0 for none */
};

static struct {
  uint64_t version;
  float data[4];
  int64_t shape[1];
  mlpt_named_tensor tensor;
} g_mailbox;

static mlpt_error* transport_create(mlpt_transport_create_args* args) {
  mlpt_transport* t = (mlpt_transport*)calloc(1, sizeof(mlpt_transport));
  if (!t) return make_error(MLPT_RESOURCE_EXHAUSTED, "out of memory");
  t->role = args->role;
  args->transport = t;
  return NULL;
}
static void transport_destroy(mlpt_transport* t) { free(t); }

static int is_endpoint(const mlpt_transport* t) {
  return t && (t->role == MLPT_TRANSPORT_SENDER || t->role == MLPT_TRANSPORT_RECEIVER);
}

static mlpt_error* transport_send(mlpt_transport_send_args* args) {
  if (args->num_tensors != 1 || args->tensors[0].tensor.ndim != 1 || args->tensors[0].tensor.shape[0] != 4)
    return make_error(MLPT_INVALID_ARGUMENT, "mailbox: carries exactly one tensor of 4 floats");
  memcpy(g_mailbox.data, args->tensors[0].tensor.data, sizeof(g_mailbox.data));
  g_mailbox.version = args->version;
  return NULL;
}

static mlpt_error* transport_receive(mlpt_transport_receive_args* args) {
  static const mlpt_string kName = STR("w");
  if (g_mailbox.version < args->min_version) return make_error(MLPT_DEADLINE_EXCEEDED, "mailbox: nothing new");
  g_mailbox.shape[0] = 4;
  memset(&g_mailbox.tensor, 0, sizeof(g_mailbox.tensor));
  g_mailbox.tensor.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
  g_mailbox.tensor.name = kName;
  g_mailbox.tensor.tensor.data = g_mailbox.data;
  g_mailbox.tensor.tensor.device.device_type = kDLCPU;
  g_mailbox.tensor.tensor.ndim = 1;
  g_mailbox.tensor.tensor.dtype.code = kDLFloat;
  g_mailbox.tensor.tensor.dtype.bits = 32;
  g_mailbox.tensor.tensor.dtype.lanes = 1;
  g_mailbox.tensor.tensor.shape = g_mailbox.shape;
  args->transport->held = g_mailbox.version;
  args->out_version = g_mailbox.version;
  args->out_tensors = &g_mailbox.tensor;
  args->out_num_tensors = 1;
  return NULL;
}

/* The 1.0/1.1 shape: (endpoint, version). */
static mlpt_error* transport_release(mlpt_transport* t, uint64_t version) {
  if (!is_endpoint(t) || t->role != MLPT_TRANSPORT_RECEIVER)
    return make_error(MLPT_INVALID_ARGUMENT, "mailbox: release was not given a receiver endpoint (wrong calling convention?)");
  if (t->held == 0 || t->held != version) return make_error(MLPT_FAILED_PRECONDITION, "mailbox: release of a version not held");
  t->held = 0;
  return NULL;
}

static const mlpt_transport_api kTransportApi = {
    MLPT_TRANSPORT_API_STRUCT_SIZE, transport_create, transport_destroy, transport_send, transport_receive,
    transport_release};
static const mlpt_transport_capabilities kTransportCaps = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE, 0, 0, 0, 0, 0};

/* ---- descriptor ---- */

static const mlpt_component kComponents[] = {
    {MLPT_COMPONENT_STRUCT_SIZE, MLPT_COMPONENT_TRAINER, STR("sgd4"), STR("four weights, one step"), &kTrainerApi,
     &kTrainerCaps},
    {MLPT_COMPONENT_STRUCT_SIZE, MLPT_COMPONENT_TRANSPORT, STR("mailbox"), STR("copies one tensor in-process"),
     &kTransportApi, &kTransportCaps},
};

static const mlpt_plugin_descriptor kDescriptor = {
    MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE, {MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR}, STR("old-plugin"),
    STR("1.0.0"), sizeof(kComponents) / sizeof(kComponents[0]), kComponents,
    {MLPT_ERROR_API_STRUCT_SIZE, error_destroy, error_code, error_message}, NULL};

MLPT_EXPORT mlpt_error* mlpt_plugin_init(mlpt_plugin_init_args* args) {
  if (args->host_abi_version.major != MLPT_ABI_VERSION_MAJOR) return NULL;
  args->descriptor = &kDescriptor;
  return NULL;
}
