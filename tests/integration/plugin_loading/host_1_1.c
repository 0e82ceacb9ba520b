/* A host exactly as ABI 1.1 saw the boundary (built against abi/snapshots/1.1 only): it loads a
 * 1.2 plugin built with the SDK and uses it through 1.1's structs and table shapes.
 *
 *   host_1_1 <inprocess transport plugin> <sdk probe plugin>
 *
 * 1. The in-process transport (a real 1.2 plugin) loads, a sender and a receiver are created with
 *    1.1-sized args, a tensor goes across zero-copy, and `release` is called in 1.1's shape.
 * 2. The probe's "rendezvous" transport truly needs the host's key-value store (1.2): its create is
 *    refused with a message that names the store and the host's version.
 * Prints what it checks; exits 0 when everything holds. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "mlpt/mlpt.h"
#include "mlpt/transport.h"

static int failures = 0;
#define EXPECT(cond, what)                                   \
  do {                                                       \
    if (cond) {                                              \
      printf("ok: %s\n", what);                              \
    } else {                                                 \
      printf("FAILED: %s (line %d)\n", what, __LINE__);      \
      ++failures;                                            \
    }                                                        \
  } while (0)

static void host_log(void* ctx, mlpt_log_level level, mlpt_string source, mlpt_string message) {
  (void)ctx;
  printf("  [plugin log %d] %.*s: %.*s\n", (int)level, (int)source.size, source.data, (int)message.size, message.data);
}
static void host_metric(void* ctx, mlpt_string name, double value) { (void)ctx; (void)name; (void)value; }
static uint64_t host_now(void* ctx) { (void)ctx; return 0; }
static int host_cancelled(void* ctx) { (void)ctx; return 0; }

static mlpt_host_services make_host(void) {
  mlpt_host_services h;
  memset(&h, 0, sizeof(h));
  h.struct_size = MLPT_HOST_SERVICES_STRUCT_SIZE; /* the 1.1 size: no process, no kv store */
  h.abi_version.major = 1;
  h.abi_version.minor = 1;
  h.log = host_log;
  h.metric = host_metric;
  h.now_ns = host_now;
  h.is_cancelled = host_cancelled;
  return h;
}

static const mlpt_plugin_descriptor* load(const char* path, const mlpt_host_services* host) {
  mlpt_plugin_init_fn init;
  mlpt_plugin_init_args args;
  mlpt_error* error;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    printf("FAILED: dlopen %s: %s\n", path, dlerror());
    return NULL;
  }
  *(void**)(&init) = dlsym(handle, MLPT_PLUGIN_ENTRY_SYMBOL);
  if (!init) return NULL;
  memset(&args, 0, sizeof(args));
  args.struct_size = MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE; /* 1.1's */
  args.host_abi_version.major = 1;
  args.host_abi_version.minor = 1;
  args.host = host;
  error = init(&args);
  if (error) {
    mlpt_string m = args.descriptor->errors.error_message(error);
    printf("FAILED: %s refused a 1.1 host: %.*s\n", path, (int)m.size, m.data);
    args.descriptor->errors.error_destroy(error);
    return NULL;
  }
  return args.descriptor;
}

static const mlpt_component* find(const mlpt_plugin_descriptor* d, const char* name) {
  size_t i;
  for (i = 0; i < d->num_components; ++i)
    if (d->components[i].kind == MLPT_COMPONENT_TRANSPORT && d->components[i].name.size == strlen(name) &&
        memcmp(d->components[i].name.data, name, strlen(name)) == 0)
      return &d->components[i];
  return NULL;
}

static void check_transport(const mlpt_plugin_descriptor* d) {
  const mlpt_component* c = find(d, "inprocess");
  const mlpt_transport_api* api;
  mlpt_transport_create_args create;
  mlpt_transport *sender, *receiver;
  mlpt_transport_send_args send;
  mlpt_transport_receive_args receive;
  mlpt_named_tensor tensor;
  float data[3] = {1.5f, -2.0f, 3.25f};
  int64_t shape[1] = {3};
  mlpt_error* e;
  static const char group[] = "host-1.1", config[] = "{\"receivers\": 1, \"timeout_ms\": 2000}";

  EXPECT(d->abi_version.major == 1 && d->abi_version.minor >= 2, "the plugin declares ABI 1.2 or newer");
  EXPECT(c != NULL, "the in-process transport component is listed");
  if (!c) return;
  api = (const mlpt_transport_api*)c->api;
  /* A 1.2 table begins with 1.1's, `release` in its 1.1 form included: a 1.1 host reads its prefix. */
  EXPECT(api->struct_size >= MLPT_TRANSPORT_API_STRUCT_SIZE, "its table holds at least 1.1's");

  memset(&create, 0, sizeof(create));
  create.struct_size = MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE; /* 1.1's: no extension_start */
  create.config_json.data = config;
  create.config_json.size = sizeof(config) - 1;
  create.group.data = group;
  create.group.size = sizeof(group) - 1;
  create.role = MLPT_TRANSPORT_RECEIVER;
  e = api->create(&create);
  EXPECT(e == NULL, "a receiver is created with 1.1-sized args");
  if (e) return;
  receiver = create.transport;
  create.role = MLPT_TRANSPORT_SENDER;
  create.transport = NULL;
  e = api->create(&create);
  EXPECT(e == NULL, "a sender is created with 1.1-sized args");
  if (e) return;
  sender = create.transport;

  memset(&tensor, 0, sizeof(tensor));
  tensor.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
  tensor.name.data = "w";
  tensor.name.size = 1;
  tensor.tensor.data = data;
  tensor.tensor.device.device_type = kDLCPU;
  tensor.tensor.ndim = 1;
  tensor.tensor.dtype.code = kDLFloat;
  tensor.tensor.dtype.bits = 32;
  tensor.tensor.dtype.lanes = 1;
  tensor.tensor.shape = shape;
  memset(&send, 0, sizeof(send));
  send.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
  send.transport = sender;
  send.version = 1;
  send.tensors = &tensor;
  send.num_tensors = 1;
  send.timeout_ms = 2000;
  EXPECT(api->send(&send) == NULL, "send with 1.1-sized args");

  memset(&receive, 0, sizeof(receive));
  receive.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
  receive.transport = receiver;
  receive.min_version = 1;
  receive.timeout_ms = 2000;
  e = api->receive(&receive);
  EXPECT(e == NULL && receive.out_version == 1 && receive.out_num_tensors == 1, "receive returns version 1");
  if (!e && receive.out_num_tensors == 1) {
    EXPECT(receive.out_tensors[0].tensor.data == (void*)data, "zero-copy: the receiver sees the sender's memory");
    EXPECT(memcmp(receive.out_tensors[0].tensor.data, data, sizeof(data)) == 0, "the values arrive unchanged");
  }
  /* 1.1's shape: (endpoint, version). */
  EXPECT(api->release(receiver, 1) == NULL, "release in 1.1's calling convention");
  api->destroy(receiver);
  api->destroy(sender);
}

static void check_refusal(const mlpt_plugin_descriptor* d) {
  const mlpt_component* c = find(d, "rendezvous");
  const mlpt_transport_api* api;
  mlpt_transport_create_args create;
  mlpt_error* e;
  EXPECT(c != NULL, "the probe's rendezvous transport is listed");
  if (!c) return;
  api = (const mlpt_transport_api*)c->api;
  memset(&create, 0, sizeof(create));
  create.struct_size = MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE;
  create.role = MLPT_TRANSPORT_SENDER;
  e = api->create(&create);
  EXPECT(e != NULL, "a component that needs the key-value store refuses a 1.1 host");
  if (e) {
    mlpt_string m = d->errors.error_message(e);
    char text[512];
    size_t n = m.size < sizeof(text) - 1 ? m.size : sizeof(text) - 1;
    memcpy(text, m.data, n);
    text[n] = 0;
    printf("  message: %s\n", text);
    EXPECT(d->errors.error_code(e) == MLPT_FAILED_PRECONDITION, "with MLPT_FAILED_PRECONDITION");
    EXPECT(strstr(text, "key-value store") && strstr(text, "ABI 1.2") && strstr(text, "declares ABI 1.1"),
           "naming what it needs, the version that has it and the host's version");
    d->errors.error_destroy(e);
  }
}

/* A host of another major: the plugin refuses with an error it hands a descriptor to destroy with. */
static void check_major_refusal(const char* path, const mlpt_host_services* host) {
  mlpt_plugin_init_fn init;
  mlpt_plugin_init_args args;
  mlpt_error* e;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) return;
  *(void**)(&init) = dlsym(handle, MLPT_PLUGIN_ENTRY_SYMBOL);
  memset(&args, 0, sizeof(args));
  args.struct_size = MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE;
  args.host_abi_version.major = 2;
  args.host = host;
  e = init(&args);
  EXPECT(e != NULL && args.descriptor != NULL, "a host of major 2 is refused with an error and a descriptor");
  if (e && args.descriptor) {
    mlpt_string m = args.descriptor->errors.error_message(e);
    printf("  message: %.*s\n", (int)m.size, m.data);
    EXPECT(args.descriptor->errors.error_code(e) == MLPT_FAILED_PRECONDITION, "the refusal is MLPT_FAILED_PRECONDITION");
    args.descriptor->errors.error_destroy(e);
  }
}

int main(int argc, char** argv) {
  mlpt_host_services host = make_host();
  const mlpt_plugin_descriptor* d;
  if (argc != 3) {
    fprintf(stderr, "usage: host_1_1 <inprocess transport plugin> <sdk probe plugin>\n");
    return 2;
  }
  d = load(argv[1], &host);
  EXPECT(d != NULL, "a 1.2 plugin loads in a host that declares 1.1");
  if (d) check_transport(d);
  d = load(argv[2], &host);
  EXPECT(d != NULL, "the 1.2 probe plugin loads in a host that declares 1.1");
  if (d) check_refusal(d);
  check_major_refusal(argv[2], &host);
  printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
