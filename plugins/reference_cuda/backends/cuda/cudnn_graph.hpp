// cuDNN's backend (graph) API, loaded at run time, and a small builder for its operation graphs.
//
// Why loaded at run time: the backend's executables then start on a machine without cuDNN (or with
// another 9.x), and only the option that asks for it (cuda_attention = "cudnn") fails, naming the
// library it looked for. Why the backend API itself: it is cuDNN's C interface; the C++ frontend is
// a header library over it that this build does not have.
//
// Every call is checked: a failure throws mlpt::sdk::Error naming the graph, the step, cuDNN's
// status and its last error message. Built only where cuDNN's headers are (MLPT_HAVE_CUDNN).
#pragma once

#include <cudnn_backend.h>
#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda::cudnn {

// The library's entry points; load() finds libcudnn.so.9 once per process (throws
// MLPT_FAILED_PRECONDITION saying what was tried when it cannot).
struct Api {
  decltype(&::cudnnGetVersion) get_version;
  decltype(&::cudnnGetErrorString) error_string;
  decltype(&::cudnnGetLastErrorString) last_error;
  decltype(&::cudnnCreate) create;
  decltype(&::cudnnDestroy) destroy;
  decltype(&::cudnnSetStream) set_stream;
  decltype(&::cudnnBackendCreateDescriptor) create_descriptor;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_descriptor;
  decltype(&::cudnnBackendFinalize) finalize;
  decltype(&::cudnnBackendSetAttribute) set_attribute;
  decltype(&::cudnnBackendGetAttribute) get_attribute;
  decltype(&::cudnnBackendExecute) execute;
};
const Api& load();

// Throws MLPT_INTERNAL "cuDNN: <where>: <step>: <status> (<last error message>)".
void check(cudnnStatus_t status, const std::string& where, const char* step);

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(cudnnBackendDescriptorType_t type, const std::string& where);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Tensor identities in a graph: uid (0 = none), and whether its data comes from the variant pack.
struct Tensor {
  int64_t uid = 0;
  cudnnBackendDescriptor_t desc = nullptr;
};

struct TensorSpec {
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = true;
  bool by_value = false;  // a scalar passed by host pointer at execution
  Tensor ragged{};        // per-batch row starts (int64 [b + 1]), or none
};

// Builds one operation graph and its execution plan. Tensors and operations are added in data-flow
// order; plan() asks the heuristics (mode A, then the fallback list) and keeps the first engine
// configuration that finalizes. `where` names the graph in every error.
class GraphBuilder {
 public:
  GraphBuilder(cudnnHandle_t handle, std::string where);

  Tensor tensor(const TensorSpec& spec);
  // A virtual tensor shaped like `like` (dims and strides) with another type.
  Tensor virtual_like(const TensorSpec& like, cudnnDataType_t type);
  const TensorSpec& spec(const Tensor& t) const;

  // y = mode(x[, b[, t]]); `precision` is the math type; `axis` for GEN_INDEX only (-1: none).
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision, Tensor x, Tensor b, Tensor t, Tensor y,
                 int64_t axis = -1);
  // c = a · b over the two innermost dims, batched over the others (broadcast where a dim is 1 or
  // divides, as grouped heads do); m/n/k overrides: per-batch true sizes (int32 [b,1,1,1]) or none.
  void matmul(Tensor a, Tensor b, Tensor c, Tensor m_override, Tensor n_override, Tensor k_override,
              const double* padding_value = nullptr);
  void reduction(cudnnReduceTensorOp_t op, Tensor x, Tensor y);
  void reshape(Tensor x, Tensor y);
  // y [b, h, len, d] (or its transpose) gathered from container [blocks, h, block_size, d] through
  // page_table [b, 1, columns, 1] for the first lengths[b] positions (int32 [b, 1, 1, 1]).
  void paged_cache_load(Tensor container, Tensor lengths, Tensor page_table, Tensor y);

  struct Plan {
    Descriptor graph, plan;
    int64_t workspace = 0;
    std::vector<Descriptor> keep;  // tensors and operations the plan refers to
  };
  Plan plan();
  // The operation graph alone, finalized (cuDNN checks every operation's shapes and types against
  // the others); with a null handle it needs no GPU.
  Descriptor graph();

 private:
  Tensor make(const TensorSpec& spec);
  void add_op(Descriptor op);

  cudnnHandle_t handle_;
  std::string where_;
  int64_t next_uid_ = 1;
  std::vector<Descriptor> tensors_, ops_;
  std::vector<Descriptor> helpers_;  // pointwise, matmul and reduction descriptors the operations use
  std::vector<TensorSpec> specs_;
};

// Runs `plan` with the given (uid, pointer) pairs and workspace on the handle's stream.
void execute(cudnnHandle_t handle, const GraphBuilder::Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace, const std::string& where);

}  // namespace mlpt::ref::cuda::cudnn
