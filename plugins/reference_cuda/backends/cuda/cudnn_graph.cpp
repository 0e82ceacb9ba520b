#include "backends/cuda/cudnn_graph.hpp"

#include <dlfcn.h>

#include <mutex>
#include <utility>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda::cudnn {

namespace {

template <class F>
void bind(void* lib, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) missing += std::string(missing.empty() ? "" : ", ") + name;
}

Api open_library() {
  // libcudnn.so.9 is the 9.x loader (it opens the graph, heuristic and engine libraries itself).
  const char* names[] = {"libcudnn.so.9", "libcudnn.so"};
  void* lib = nullptr;
  std::string tried;
  for (const char* n : names) {
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + n + ": " + (e ? e : "not found");
  }
  if (!lib)
    throw sdk::Error(
        MLPT_FAILED_PRECONDITION,
        "cuda_attention = \"cudnn\": cuDNN 9 could not be loaded (" + tried +
            "); install it or add its folder to LD_LIBRARY_PATH, or use cuda_attention = \"kernel\"");
  Api a{};
  std::string missing;
  bind(lib, "cudnnGetVersion", a.get_version, missing);
  bind(lib, "cudnnGetErrorString", a.error_string, missing);
  bind(lib, "cudnnGetLastErrorString", a.last_error, missing);
  bind(lib, "cudnnCreate", a.create, missing);
  bind(lib, "cudnnDestroy", a.destroy, missing);
  bind(lib, "cudnnSetStream", a.set_stream, missing);
  bind(lib, "cudnnBackendCreateDescriptor", a.create_descriptor, missing);
  bind(lib, "cudnnBackendDestroyDescriptor", a.destroy_descriptor, missing);
  bind(lib, "cudnnBackendFinalize", a.finalize, missing);
  bind(lib, "cudnnBackendSetAttribute", a.set_attribute, missing);
  bind(lib, "cudnnBackendGetAttribute", a.get_attribute, missing);
  bind(lib, "cudnnBackendExecute", a.execute, missing);
  if (!missing.empty())
    throw sdk::Error(MLPT_FAILED_PRECONDITION, "cuda_attention = \"cudnn\": the cuDNN library found lacks " +
                                                   missing + " (cuDNN 9 is needed)");
  const size_t v = a.get_version();
  if (v < 90000)
    throw sdk::Error(MLPT_FAILED_PRECONDITION, "cuda_attention = \"cudnn\": cuDNN " + std::to_string(v) +
                                                   " was loaded; the fused attention graphs need cuDNN 9");
  return a;
}

}  // namespace

const Api& load() {
  static std::once_flag once;
  static Api api;
  static std::string failure;
  std::call_once(once, [] {
    try {
      api = open_library();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw sdk::Error(MLPT_FAILED_PRECONDITION, failure);
  return api;
}

void check(cudnnStatus_t status, const std::string& where, const char* step) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const Api& a = load();
  char message[1024] = {};
  a.last_error(message, sizeof message);
  throw sdk::Error(MLPT_INTERNAL, "cuDNN: " + where + ": " + step + ": " + a.error_string(status) +
                                      (message[0] ? std::string(" (") + message + ")" : std::string()));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, const std::string& where) {
  check(load().create_descriptor(type, &d_), where, "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (d_) load().destroy_descriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_) load().destroy_descriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

namespace {

// Attribute setters: one value or an array, checked with the attribute named.
template <class T>
void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
         int64_t count, const T* values, const std::string& where, const char* what) {
  check(load().set_attribute(d, name, type, count, values), where, what);
}
void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
              const std::string& where, const char* what) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, where, what);
}
void finalize(cudnnBackendDescriptor_t d, const std::string& where, const char* what) {
  check(load().finalize(d), where, what);
}

}  // namespace

GraphBuilder::GraphBuilder(cudnnHandle_t handle, std::string where)
    : handle_(handle), where_(std::move(where)) {}

Tensor GraphBuilder::make(const TensorSpec& s) {
  if (s.dims.size() != s.strides.size() || s.dims.empty())
    throw sdk::Error(MLPT_INTERNAL, "cuDNN: " + where_ + ": a tensor's dims and strides differ in rank");
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, where_);
  const int64_t uid = next_uid_++;
  const auto rank = static_cast<int64_t>(s.dims.size());
  const int64_t alignment = 16;
  set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type, where_, "tensor type");
  set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, s.dims.data(), where_, "tensor dims");
  set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, s.strides.data(), where_, "tensor strides");
  set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, where_, "tensor uid");
  set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, where_, "tensor alignment");
  const bool is_virtual = s.is_virtual && !s.by_value;
  set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, where_, "tensor is virtual");
  if (s.by_value)
    set(t.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &s.by_value, where_, "by value");
  if (s.ragged.desc)
    set_desc(t.get(), CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, s.ragged.desc, where_, "ragged offset");
  finalize(t.get(), where_, "tensor");
  Tensor out{uid, t.get()};
  tensors_.push_back(std::move(t));
  specs_.push_back(s);
  return out;
}

Tensor GraphBuilder::tensor(const TensorSpec& spec) {
  return make(spec);
}

Tensor GraphBuilder::virtual_like(const TensorSpec& like, cudnnDataType_t type) {
  TensorSpec s{like.dims, like.strides, type, true, false, {}};
  return make(s);
}

const TensorSpec& GraphBuilder::spec(const Tensor& t) const {
  return specs_.at(size_t(t.uid - 1));
}

void GraphBuilder::add_op(Descriptor op) {
  finalize(op.get(), where_, "operation");
  ops_.push_back(std::move(op));
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision, Tensor x, Tensor b,
                             Tensor t, Tensor y, int64_t axis) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, where_);
  set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, where_, "pointwise mode");
  set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision, where_,
      "pointwise precision");
  if (axis >= 0)
    set(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, where_, "pointwise axis");
  finalize(pw.get(), where_, "pointwise descriptor");
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, where_);
  set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get(), where_, "pointwise op");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc, where_, "pointwise x");
  if (b.desc) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b.desc, where_, "pointwise b");
  if (t.desc) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t.desc, where_, "pointwise t");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc, where_, "pointwise y");
  helpers_.push_back(std::move(pw));  // kept alive with the operation that refers to it
  add_op(std::move(op));
}

void GraphBuilder::matmul(Tensor a, Tensor b, Tensor c, Tensor m_override, Tensor n_override,
                          Tensor k_override, const double* padding_value) {
  Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, where_);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  set(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, where_,
      "matmul compute type");
  if (padding_value)
    set(mm.get(), CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, padding_value, where_,
        "matmul padding");
  finalize(mm.get(), where_, "matmul descriptor");
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, where_);
  set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc, where_, "matmul a");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc, where_, "matmul b");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc, where_, "matmul c");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get(), where_, "matmul op");
  if (m_override.desc)
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override.desc, where_, "matmul m");
  if (n_override.desc)
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override.desc, where_, "matmul n");
  if (k_override.desc)
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override.desc, where_, "matmul k");
  helpers_.push_back(std::move(mm));
  add_op(std::move(op));
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t reduce, Tensor x, Tensor y) {
  Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, where_);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  set(r.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, where_,
      "reduction operator");
  set(r.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, where_,
      "reduction compute type");
  finalize(r.get(), where_, "reduction descriptor");
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, where_);
  set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc, where_, "reduction x");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc, where_, "reduction y");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get(), where_, "reduction op");
  helpers_.push_back(std::move(r));
  add_op(std::move(op));
}

void GraphBuilder::reshape(Tensor x, Tensor y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, where_);
  set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc, where_, "reshape x");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc, where_, "reshape y");
  add_op(std::move(op));
}

void GraphBuilder::paged_cache_load(Tensor container, Tensor lengths, Tensor page_table, Tensor y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, where_);
  set_desc(op.get(), CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, container.desc, where_,
           "paged container");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, page_table.desc, where_,
           "page table");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, lengths.desc, where_,
           "paged lengths");
  set_desc(op.get(), CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, y.desc, where_, "paged y");
  add_op(std::move(op));
}

Descriptor GraphBuilder::graph() {
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, where_);
  std::vector<cudnnBackendDescriptor_t> graph_ops;
  for (const Descriptor& d : ops_) graph_ops.push_back(d.get());
  set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(graph_ops.size()),
      graph_ops.data(), where_, "graph operations");
  if (handle_)
    set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, where_,
        "graph handle");
  finalize(graph.get(), where_, "operation graph");
  return graph;
}

GraphBuilder::Plan GraphBuilder::plan() {
  const Api& api = load();
  Plan p;
  p.graph = graph();
  std::string failures;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, where_);
    cudnnBackendDescriptor_t g = p.graph.get();
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, where_,
        "heuristics graph");
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, where_, "heuristics mode");
    finalize(heur.get(), where_, "heuristics");
    int64_t count = 0;
    check(api.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                            &count, nullptr),
          where_, "heuristics result count");
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, where_);
      raw.push_back(configs.back().get());
    }
    int64_t got = 0;
    if (count > 0)
      check(api.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                              &got, raw.data()),
            where_, "heuristics results");
    for (int64_t i = 0; i < got; ++i) {
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, where_);
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, where_,
          "plan handle");
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &raw[size_t(i)], where_, "plan engine config");
      const cudnnStatus_t st = api.finalize(plan.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        char message[512] = {};
        api.last_error(message, sizeof message);
        if (failures.size() < 2000)
          failures += std::string("; engine config ") + std::to_string(i) + ": " + api.error_string(st) +
                      (message[0] ? std::string(" (") + message + ")" : std::string());
        continue;
      }
      int64_t n = 0;
      check(api.get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                              &p.workspace),
            where_, "plan workspace size");
      p.plan = std::move(plan);
      p.keep = std::move(tensors_);
      for (Descriptor& d : ops_) p.keep.push_back(std::move(d));
      for (Descriptor& d : helpers_) p.keep.push_back(std::move(d));
      for (Descriptor& d : configs) p.keep.push_back(std::move(d));
      ops_.clear();
      helpers_.clear();
      return p;
    }
  }
  throw sdk::Error(MLPT_INTERNAL,
                   "cuDNN: " + where_ + ": no engine configuration could be built" +
                       (failures.empty() ? std::string(" (the heuristics offered none)") : failures));
}

void execute(cudnnHandle_t handle, const GraphBuilder::Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace, const std::string& where) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, where);
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data(),
      where, "variant pack uids");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()),
      pointers.data(), where, "variant pack pointers");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, where,
      "variant pack workspace");
  finalize(pack.get(), where, "variant pack");
  check(load().execute(handle, plan.plan.get(), pack.get()), where, "cudnnBackendExecute");
}

}  // namespace mlpt::ref::cuda::cudnn
