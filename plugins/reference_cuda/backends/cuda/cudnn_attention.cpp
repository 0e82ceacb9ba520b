// The graphs follow cuDNN's documented fused flash attention patterns (forward: Q·Kᵀ, scale, masks,
// softmax with its statistics, ·V; backward: the same scores recomputed from the statistics, then
// dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O)) · scale, dK = dSᵀ·Q, dQ = dS·K), written against the
// backend API: every tensor a descriptor with dims [batch, heads, length, head_dim] over the packed
// [tokens, heads, head_dim] memory (ragged offsets), every step one operation.
#include "backends/cuda/cudnn_attention.hpp"

#include "mlpt/sdk/error.hpp"

#if MLPT_HAVE_CUDNN

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_graph.hpp"
#include "backends/cuda/sdpa_offsets.hpp"
#include "device_model/gemm_plan_cache.hpp"
#include "device_model/sdpa_plan.hpp"

namespace mlpt::ref::cuda {

namespace {

using cudnn::GraphBuilder;
using cudnn::Tensor;
using cudnn::TensorSpec;

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kBf16 = CUDNN_DATA_BFLOAT16, kI32 = CUDNN_DATA_INT32,
                          kI64 = CUDNN_DATA_INT64, kBool = CUDNN_DATA_BOOLEAN;
const Tensor kNone{};

// Which variant-pack entry each non-virtual tensor of a graph is.
// clang-format off
enum Slot {
  kQ, kK, kV, kO, kStats, kDo, kDq, kDk, kDv,               // data (paged: kK, kV are the pools)
  kQLen, kKvLen,                                           // int32 [b]
  kQRows, kKRows, kVRows, kORows, kStatsRows,              // ragged offsets of the data tensors
  kDoRows, kDqRows, kDkRows, kDvRows, kRowSumRows,
  kDqAccRows, kDkFullRows, kDvFullRows,
  kRowSums, kDqAcc, kDkFull, kDvFull,                      // backward scratch
  kPageTableK, kPageTableV,                                // paged forward: [b, 1, width, 1]
  kScale, kNegInf, kOne,                                   // host scalars
  kSlots
};
// clang-format on

struct BuiltPlan {
  GraphBuilder::Plan plan;
  int64_t uid[kSlots] = {};
};

// The shapes of one key's tensors.
struct Layout {
  int64_t b, H, Hkv, D, sq, skv;
  explicit Layout(const SdpaShapeKey& k)
      : b(k.batch), H(k.heads), Hkv(k.kv_heads), D(k.head_dim), sq(k.max_q), skv(k.max_kv) {}
  // [b, heads, len, D] over packed [tokens, heads, D].
  TensorSpec rows(int64_t heads, int64_t len, cudnnDataType_t t, Tensor ragged) const {
    return {{b, heads, len, D}, {len * heads * D, D, heads * D, 1}, t, false, false, ragged};
  }
  // The transpose [b, heads, D, len] of the same memory.
  TensorSpec rows_t(int64_t heads, int64_t len, Tensor ragged) const {
    return {{b, heads, D, len}, {len * heads * D, D, 1, heads * D}, kBf16, false, false, ragged};
  }
  TensorSpec stats(Tensor ragged) const {
    return {{b, H, sq, 1}, {sq * H, 1, H, 1}, kF32, false, false, ragged};
  }
  TensorSpec scores() const { return {{b, H, sq, skv}, {H * sq * skv, sq * skv, skv, 1}, kF32}; }
  TensorSpec scores_t(cudnnDataType_t t) const {
    return {{b, H, skv, sq}, {H * sq * skv, sq * skv, 1, skv}, t};
  }
  TensorSpec per_row() const { return {{b, H, sq, 1}, {H * sq, sq, 1, 1}, kF32}; }
};

TensorSpec lengths_spec(int64_t b) {
  return {{b, 1, 1, 1}, {1, 1, 1, 1}, kI32, false};
}
TensorSpec ragged_spec(int64_t b) {
  return {{b + 1, 1, 1, 1}, {1, 1, 1, 1}, kI64, false};
}
TensorSpec scalar_spec() {
  return {{1, 1, 1, 1}, {1, 1, 1, 1}, kF32, false, true};
}

struct Common {
  Tensor q_len, kv_len, scale, neg_inf;
};

Common common_inputs(GraphBuilder& g, BuiltPlan& p, int64_t b) {
  Common c;
  c.q_len = g.tensor(lengths_spec(b));
  c.kv_len = g.tensor(lengths_spec(b));
  c.scale = g.tensor(scalar_spec());
  c.neg_inf = g.tensor(scalar_spec());
  p.uid[kQLen] = c.q_len.uid;
  p.uid[kKvLen] = c.kv_len.uid;
  p.uid[kScale] = c.scale.uid;
  p.uid[kNegInf] = c.neg_inf.uid;
  return c;
}

Tensor ragged(GraphBuilder& g, BuiltPlan& p, Slot slot, int64_t b) {
  const Tensor t = g.tensor(ragged_spec(b));
  p.uid[slot] = t.uid;
  return t;
}

Tensor data(GraphBuilder& g, BuiltPlan& p, Slot slot, const TensorSpec& spec) {
  const Tensor t = g.tensor(spec);
  p.uid[slot] = t.uid;
  return t;
}

// Rows past a sequence's query length and columns past its key length are masked out.
Tensor padding_mask(GraphBuilder& g, const Layout& l, const Common& c, Tensor s) {
  const TensorSpec sc = l.scores();
  const Tensor row = g.virtual_like(sc, kI32), col = g.virtual_like(sc, kI32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, kI32, s, kNone, kNone, row, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, kI32, s, kNone, kNone, col, 3);
  const Tensor row_in = g.virtual_like(sc, kBool), col_in = g.virtual_like(sc, kBool),
               in = g.virtual_like(sc, kBool);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, kBool, row, c.q_len, kNone, row_in);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, kBool, col, c.kv_len, kNone, col_in);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, kBool, row_in, col_in, kNone, in);
  const Tensor out = g.virtual_like(sc, kF32);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, kF32, s, c.neg_inf, in, out);
  return out;
}

// Column j is kept for row i when i + kv_len − q_len >= j: causal with the diagonal at the bottom
// right, each sequence's queries being the last of its keys.
Tensor causal_mask(GraphBuilder& g, const Layout& l, const Common& c, Tensor s) {
  const TensorSpec sc = l.scores();
  const Tensor r = g.virtual_like(sc, kI32), j = g.virtual_like(sc, kI32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, kF32, s, kNone, kNone, r, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, kF32, s, kNone, kNone, j, 3);
  const Tensor shifted = g.virtual_like(sc, kI32), diagonal = g.virtual_like(sc, kI32);
  g.pointwise(CUDNN_POINTWISE_ADD, kI32, r, c.kv_len, kNone, shifted);
  g.pointwise(CUDNN_POINTWISE_SUB, kI32, shifted, c.q_len, kNone, diagonal);
  const Tensor keep = g.virtual_like(sc, kBool);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, kBool, diagonal, j, kNone, keep);
  const Tensor out = g.virtual_like(sc, kF32);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, kF32, s, c.neg_inf, keep, out);
  return out;
}

// With a null handle the graph is only finalized (no plan, no GPU): validate_graphs().
BuiltPlan build_forward(cudnnHandle_t handle, const SdpaShapeKey& key) {
  const Layout l(key);
  GraphBuilder g(handle, "fused attention " + describe(key));
  BuiltPlan p;
  const Common c = common_inputs(g, p, l.b);
  const Tensor q = data(g, p, kQ, l.rows(l.H, l.sq, kBf16, ragged(g, p, kQRows, l.b)));
  Tensor kt, v;
  if (key.pass == SdpaPass::paged_forward) {
    // The pools [blocks, block_size, Hkv, D] as cuDNN's containers [blocks, Hkv, block_size, D].
    const int64_t bs = key.block_size, width = key.table_width;
    const TensorSpec pool{
        {key.pool_blocks, l.Hkv, bs, l.D}, {bs * l.Hkv * l.D, l.D, l.Hkv * l.D, 1}, kBf16, false};
    const TensorSpec table{{l.b, 1, width, 1}, {width, width, 1, 1}, kI32, false};
    const Tensor k_pool = data(g, p, kK, pool), v_pool = data(g, p, kV, pool);
    const Tensor k_table = data(g, p, kPageTableK, table), v_table = data(g, p, kPageTableV, table);
    kt = g.tensor({{l.b, l.Hkv, l.D, l.skv}, {l.D * l.skv * l.Hkv, l.D * l.skv, 1, l.D}, kBf16});
    v = g.tensor({{l.b, l.Hkv, l.skv, l.D}, {l.D * l.skv * l.Hkv, l.D * l.skv, l.D, 1}, kBf16});
    g.paged_cache_load(k_pool, c.kv_len, k_table, kt);
    g.paged_cache_load(v_pool, c.kv_len, v_table, v);
  } else {
    kt = data(g, p, kK, l.rows_t(l.Hkv, l.skv, ragged(g, p, kKRows, l.b)));
    v = data(g, p, kV, l.rows(l.Hkv, l.skv, kBf16, ragged(g, p, kVRows, l.b)));
  }
  const Tensor o = data(g, p, kO, l.rows(l.H, l.sq, kBf16, ragged(g, p, kORows, l.b)));
  const Tensor stats = data(g, p, kStats, l.stats(ragged(g, p, kStatsRows, l.b)));

  const TensorSpec sc = l.scores(), row = l.per_row();
  const Tensor s = g.virtual_like(sc, kF32);
  const double zero = 0.0;  // rows and columns past a sequence's length read as zero
  g.matmul(q, kt, s, c.q_len, c.kv_len, kNone, &zero);
  const Tensor scaled = g.virtual_like(sc, kF32);
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, s, c.scale, kNone, scaled);
  const Tensor m = causal_mask(g, l, c, padding_mask(g, l, c, scaled));
  // Softmax with its statistics: max, exp of the difference, sum, log-sum-exp, division.
  const Tensor mx = g.virtual_like(row, kF32), diff = g.virtual_like(sc, kF32), e = g.virtual_like(sc, kF32);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, m, mx);
  g.pointwise(CUDNN_POINTWISE_SUB, kF32, m, mx, kNone, diff);
  g.pointwise(CUDNN_POINTWISE_EXP, kF32, diff, kNone, kNone, e);
  const Tensor sum = g.virtual_like(row, kF32), log_sum = g.virtual_like(row, kF32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, kF32, sum, kNone, kNone, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, kF32, mx, log_sum, kNone, stats);
  const Tensor prob = g.virtual_like(sc, kBf16);  // the second product's input type
  g.pointwise(CUDNN_POINTWISE_DIV, kF32, e, sum, kNone, prob);
  g.matmul(prob, v, o, c.q_len, kNone, c.kv_len);
  if (handle)
    p.plan = g.plan();
  else
    p.plan.graph = g.graph();
  return p;
}

// Under grouped heads, dK and dV per query head (bf16, in fp32-sized scratch) before their sum over
// the group; the ragged offsets are the kv tensor's, which cuDNN scales by the head ratio itself.
Tensor per_query_head(GraphBuilder& g, BuiltPlan& p, const Layout& l, Slot slot, Slot rows_slot) {
  const int64_t group = l.H / l.Hkv;
  TensorSpec s = l.rows(l.Hkv, l.skv, kBf16, ragged(g, p, rows_slot, l.b));
  s.dims[1] = l.H;
  s.strides[0] *= group;
  s.strides[2] *= group;
  return data(g, p, slot, s);
}

BuiltPlan build_backward(cudnnHandle_t handle, const SdpaShapeKey& key) {
  const Layout l(key);
  GraphBuilder g(handle, "fused attention " + describe(key));
  BuiltPlan p;
  const Common c = common_inputs(g, p, l.b);
  const Tensor one = g.tensor(scalar_spec());
  p.uid[kOne] = one.uid;
  const Tensor q = data(g, p, kQ, l.rows(l.H, l.sq, kBf16, ragged(g, p, kQRows, l.b)));
  const Tensor k_rows = ragged(g, p, kKRows, l.b);
  const Tensor kt = data(g, p, kK, l.rows_t(l.Hkv, l.skv, k_rows));
  const Tensor vt = data(g, p, kV, l.rows_t(l.Hkv, l.skv, ragged(g, p, kVRows, l.b)));
  const Tensor o = data(g, p, kO, l.rows(l.H, l.sq, kBf16, ragged(g, p, kORows, l.b)));
  const Tensor stats = data(g, p, kStats, l.stats(ragged(g, p, kStatsRows, l.b)));
  const Tensor d_o = data(g, p, kDo, l.rows(l.H, l.sq, kBf16, ragged(g, p, kDoRows, l.b)));
  const Tensor d_q = data(g, p, kDq, l.rows(l.H, l.sq, kBf16, ragged(g, p, kDqRows, l.b)));
  const Tensor d_k = data(g, p, kDk, l.rows(l.Hkv, l.skv, kBf16, ragged(g, p, kDkRows, l.b)));
  const Tensor d_v = data(g, p, kDv, l.rows(l.Hkv, l.skv, kBf16, ragged(g, p, kDvRows, l.b)));
  const TensorSpec sc = l.scores(), row = l.per_row();

  // rowsum(dO ∘ O), kept in scratch (packed like the statistics).
  const TensorSpec prod{{l.b, l.H, l.sq, l.D}, {l.H * l.sq * l.D, l.sq * l.D, l.H * l.D, 1}, kF32};
  const Tensor d_o_o = g.virtual_like(prod, kF32), row_sum = g.virtual_like(row, kF32);
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, d_o, o, kNone, d_o_o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, row_sum);
  const Tensor row_sums = data(g, p, kRowSums, l.stats(ragged(g, p, kRowSumRows, l.b)));
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, row_sum, one, kNone, row_sums);

  // P recomputed from the statistics.
  const Tensor s = g.virtual_like(sc, kF32), scaled = g.virtual_like(sc, kF32);
  g.matmul(q, kt, s, c.q_len, c.kv_len, kNone);
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, s, c.scale, kNone, scaled);
  // The pattern's order: the padding mask, the statistics subtracted, the causal mask, exp.
  const Tensor centred = g.virtual_like(sc, kF32), prob = g.virtual_like(sc, kF32);
  g.pointwise(CUDNN_POINTWISE_SUB, kF32, padding_mask(g, l, c, scaled), stats, kNone, centred);
  g.pointwise(CUDNN_POINTWISE_EXP, kF32, causal_mask(g, l, c, centred), kNone, kNone, prob);

  // dV = Pᵀ·dO.
  const Tensor prob_t = g.virtual_like(l.scores_t(kBf16), kBf16);
  g.reshape(prob, prob_t);
  if (l.H == l.Hkv) {
    g.matmul(prob_t, d_o, d_v, c.kv_len, kNone, c.q_len);
  } else {
    const Tensor full = per_query_head(g, p, l, kDvFull, kDvFullRows);
    g.matmul(prob_t, d_o, full, c.kv_len, kNone, c.q_len);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, d_v);
  }
  // dS = P ∘ (dO·Vᵀ − rowsum) · scale.
  const Tensor dp = g.virtual_like(sc, kF32), centred_dp = g.virtual_like(sc, kF32),
               ds0 = g.virtual_like(sc, kF32), ds = g.virtual_like(sc, kF32);
  g.matmul(d_o, vt, dp, c.q_len, c.kv_len, kNone);
  g.pointwise(CUDNN_POINTWISE_SUB, kF32, dp, row_sums, kNone, centred_dp);
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, centred_dp, prob, kNone, ds0);
  g.pointwise(CUDNN_POINTWISE_MUL, kF32, ds0, c.scale, kNone, ds);
  // dK = dSᵀ·Q.
  const Tensor ds_t = g.virtual_like(l.scores_t(kBf16), kBf16);
  g.reshape(ds, ds_t);
  if (l.H == l.Hkv) {
    g.matmul(ds_t, q, d_k, c.kv_len, kNone, c.q_len);
  } else {
    const Tensor full = per_query_head(g, p, l, kDkFull, kDkFullRows);
    g.matmul(ds_t, q, full, c.kv_len, kNone, c.q_len);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, d_k);
  }
  // dQ = dS·K, accumulated in fp32 scratch, then converted.
  TensorSpec k_spec = l.rows(l.Hkv, l.skv, kBf16, k_rows);
  k_spec.is_virtual = true;
  const Tensor k = g.tensor(k_spec);
  g.reshape(kt, k);
  const Tensor dq_acc = data(g, p, kDqAcc, l.rows(l.H, l.sq, kF32, ragged(g, p, kDqAccRows, l.b)));
  g.matmul(ds, k, dq_acc, c.q_len, kNone, c.kv_len);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kF32, dq_acc, kNone, kNone, d_q);
  if (handle)
    p.plan = g.plan();
  else
    p.plan.graph = g.graph();
  return p;
}

// While the stream is being recorded as a CUDA graph (decode graphs), a first call of a shape must
// still build its plan and may grow its buffers: allocation is refused to a capturing thread unless
// it relaxes its capture mode, which this does for the call (the recorded work is unchanged; the
// buffers' addresses are in scratch_addresses(), so a later growth re-records).
class RelaxedWhileCapturing {
 public:
  explicit RelaxedWhileCapturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &status), "fused attention: cudaStreamIsCapturing");
    if (status != cudaStreamCaptureStatusActive) return;
    mode_ = cudaStreamCaptureModeRelaxed;
    check(cudaThreadExchangeStreamCaptureMode(&mode_), "fused attention: relax capture mode");
    relaxed_ = true;
  }
  ~RelaxedWhileCapturing() {
    if (relaxed_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedWhileCapturing(const RelaxedWhileCapturing&) = delete;
  RelaxedWhileCapturing& operator=(const RelaxedWhileCapturing&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeGlobal;
  bool relaxed_ = false;
};

}  // namespace

struct CudnnAttention::State {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  GemmPlanCache<BuiltPlan, SdpaShapeKey, SdpaShapeKeyHash> plans{kMaxPlans};
  DeviceBuffer workspace, sequences, stats;
  // Host scalars the plans read by value at execution.
  size_t device_bytes = 0;  // the device's memory: bounds a paged pool's blocks (sdpa_paged_key)
  float scale = 1.f, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.f;

  BuiltPlan& plan_for(const SdpaShapeKey& key) {
    return plans.get(key, [&] {
      return key.pass == SdpaPass::backward ? build_backward(handle, key) : build_forward(handle, key);
    });
  }
  SdpaSequenceInputs sequence_inputs(const int64_t* q_offsets, const int64_t* kv_offsets,
                                     const SdpaShapeKey& key) {
    sequences.reserve(SdpaSequenceInputs::bytes(key.batch));
    const SdpaSequenceInputs in = SdpaSequenceInputs::carve(sequences.get(), key.batch);
    sdpa_sequence_inputs(Context{stream, nullptr, nullptr}, q_offsets, kv_offsets, key.batch, key.heads,
                         key.kv_heads, key.head_dim, in);
    return in;
  }
  // The entries both passes share: the forward's inputs and outputs, lengths, row starts, scalars.
  void bind(void* (&ptr)[kSlots], const AttentionShape& shape, const SdpaSequenceInputs& in, const bf16* q,
            const bf16* k, const bf16* v, const bf16* out, const float* lse) {
    scale = 1.f / std::sqrt(float(shape.head_dim));
    ptr[kQ] = const_cast<bf16*>(q);
    ptr[kK] = const_cast<bf16*>(k);
    ptr[kV] = const_cast<bf16*>(v);
    ptr[kO] = const_cast<bf16*>(out);
    ptr[kStats] = const_cast<float*>(lse);
    ptr[kQLen] = in.q_lengths;
    ptr[kKvLen] = in.kv_lengths;
    ptr[kQRows] = ptr[kORows] = in.q_rows;
    ptr[kKRows] = ptr[kVRows] = in.kv_rows;
    ptr[kStatsRows] = in.stats_rows;
    ptr[kScale] = &scale;
    ptr[kNegInf] = &neg_inf;
  }
  void run(const BuiltPlan& p, void* const (&ptr)[kSlots], size_t scratch_bytes, const SdpaShapeKey& key) {
    std::vector<int64_t> uids;
    std::vector<void*> pointers;
    for (int s = 0; s < kSlots; ++s)
      if (p.uid[s]) {
        uids.push_back(p.uid[s]);
        pointers.push_back(ptr[s]);
      }
    // The plan's own workspace after the scratch the graph names.
    const size_t plan_bytes = size_t(p.plan.workspace);
    workspace.reserve(scratch_bytes + plan_bytes + 256);
    char* base = workspace.as<char>();
    cudnn::execute(handle, p.plan, uids, pointers, plan_bytes ? base + scratch_bytes : nullptr,
                   "fused attention " + describe(key));
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : state_(std::make_unique<State>()) {
  const cudnn::Api& api = cudnn::load();
  state_->stream = stream;
  cudnn::check(api.create(&state_->handle), "fused attention", "cudnnCreate");
  cudnn::check(api.set_stream(state_->handle, stream), "fused attention", "cudnnSetStream");
  size_t free_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &state_->device_bytes), "fused attention: cudaMemGetInfo");
}

CudnnAttention::~CudnnAttention() {
  if (state_ && state_->handle) cudnn::load().destroy(state_->handle);
}

size_t CudnnAttention::plans_built() const {
  return state_->plans.misses();
}
std::vector<const void*> CudnnAttention::scratch_addresses() const {
  return {state_->workspace.get(), state_->sequences.get(), state_->stats.get()};
}
size_t CudnnAttention::plans_reused() const {
  return state_->plans.hits();
}
size_t CudnnAttention::library_version() const {
  return cudnn::load().get_version();
}

void CudnnAttention::validate_graphs(const SdpaShapeKey& key) {
  (void)(key.pass == SdpaPass::backward ? build_backward(nullptr, key) : build_forward(nullptr, key));
}

bool CudnnAttention::forward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                             int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k,
                             const bf16* v, bf16* out, float* lse) {
  if (num_seqs <= 0 || num_q_tokens <= 0) return true;
  if (kv_offsets != q_offsets) {
    ++fallbacks_;
    return false;
  }
  State& st = *state_;
  const RelaxedWhileCapturing capture(st.stream);
  const SdpaShapeKey key =
      sdpa_shape_key(SdpaPass::forward, shape.num_heads, shape.num_kv_heads, shape.head_dim, num_seqs,
                     num_q_tokens, num_q_tokens, "attention_forward (cuDNN)");
  BuiltPlan& p = st.plan_for(key);
  const SdpaSequenceInputs in = st.sequence_inputs(q_offsets, kv_offsets, key);
  if (!lse) {  // the graph always writes its statistics
    st.stats.reserve(size_t((num_q_tokens + 127) / 128 * 128 * shape.num_heads) * sizeof(float));
    lse = st.stats.as<float>();
  }
  void* ptr[kSlots] = {};
  st.bind(ptr, shape, in, q, k, v, out, lse);
  st.run(p, ptr, 0, key);
  return true;
}

void CudnnAttention::forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                                   const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                                   const bf16* q, const bf16* k_pool, const bf16* v_pool,
                                   const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                                   bf16* out) {
  if (num_seqs <= 0 || num_q_tokens <= 0) return;
  State& st = *state_;
  const RelaxedWhileCapturing capture(st.stream);
  const SdpaShapeKey key =
      sdpa_paged_key(shape.num_heads, shape.num_kv_heads, shape.head_dim, num_seqs, num_q_tokens, max_blocks,
                     block_size, st.device_bytes, "attention_forward_paged (cuDNN)");
  BuiltPlan& p = st.plan_for(key);
  st.sequences.reserve(SdpaPagedInputs::bytes(num_seqs, key.table_width));
  const SdpaPagedInputs in = SdpaPagedInputs::carve(st.sequences.get(), num_seqs, key.table_width);
  sdpa_paged_inputs(Context{st.stream, nullptr, nullptr}, q_offsets, kv_lengths, block_table, max_blocks,
                    num_seqs, key.table_width, shape.num_heads, shape.head_dim, in);
  st.stats.reserve(size_t((num_q_tokens + 127) / 128 * 128 * shape.num_heads) *
                   sizeof(float));  // written, not needed
  st.scale = 1.f / std::sqrt(float(shape.head_dim));
  void* ptr[kSlots] = {};
  ptr[kQ] = const_cast<bf16*>(q);
  ptr[kK] = const_cast<bf16*>(k_pool);
  ptr[kV] = const_cast<bf16*>(v_pool);
  ptr[kO] = out;
  ptr[kStats] = st.stats.get();
  ptr[kQLen] = in.q_lengths;
  ptr[kKvLen] = in.kv_lengths;
  ptr[kQRows] = ptr[kORows] = in.q_rows;
  ptr[kStatsRows] = in.stats_rows;
  ptr[kPageTableK] = ptr[kPageTableV] = in.table;
  ptr[kScale] = &st.scale;
  ptr[kNegInf] = &st.neg_inf;
  st.run(p, ptr, 0, key);
}

void CudnnAttention::backward(const AttentionShape& shape, const int64_t* q_offsets,
                              const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                              int64_t num_kv_tokens, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* out, const float* lse, const bf16* d_out, bf16* d_q, bf16* d_k,
                              bf16* d_v) {
  if (num_seqs <= 0 || num_q_tokens <= 0 || num_kv_tokens <= 0) return;
  State& st = *state_;
  const RelaxedWhileCapturing capture(st.stream);
  const SdpaShapeKey key =
      sdpa_shape_key(SdpaPass::backward, shape.num_heads, shape.num_kv_heads, shape.head_dim, num_seqs,
                     num_q_tokens, num_kv_tokens, "attention_backward (cuDNN)");
  BuiltPlan& p = st.plan_for(key);
  const SdpaSequenceInputs in = st.sequence_inputs(q_offsets, kv_offsets, key);
  const SdpaBackwardScratch scratch = sdpa_backward_scratch(key, num_q_tokens, num_kv_tokens);
  st.workspace.reserve(scratch.total + size_t(p.plan.workspace) + 256);
  char* base = st.workspace.as<char>();
  // The d_q accumulator starts from zero (cheap beside the backward; the pattern does not say the
  // library clears it).
  check(cudaMemsetAsync(base + scratch.row_sums, 0, scratch.dq_accum, st.stream), "fused attention: zero dQ");
  void* ptr[kSlots] = {};
  st.bind(ptr, shape, in, q, k, v, out, lse);
  ptr[kDo] = const_cast<bf16*>(d_out);
  ptr[kDq] = d_q;
  ptr[kDk] = d_k;
  ptr[kDv] = d_v;
  ptr[kDoRows] = ptr[kDqRows] = ptr[kDqAccRows] = in.q_rows;
  ptr[kDkRows] = ptr[kDvRows] = ptr[kDkFullRows] = ptr[kDvFullRows] = in.kv_rows;
  ptr[kRowSumRows] = in.stats_rows;
  ptr[kRowSums] = base;
  ptr[kDqAcc] = base + scratch.row_sums;
  ptr[kDkFull] = base + scratch.row_sums + scratch.dq_accum;
  ptr[kDvFull] = base + scratch.row_sums + scratch.dq_accum + scratch.dk_per_head;
  ptr[kOne] = &st.one;
  st.run(p, ptr, scratch.total, key);
}

}  // namespace mlpt::ref::cuda

#else  // a build without cuDNN's headers

namespace mlpt::ref::cuda {

struct CudnnAttention::State {};

CudnnAttention::CudnnAttention(cudaStream_t) {
  throw sdk::Error(
      MLPT_FAILED_PRECONDITION,
      "cuda_attention = \"cudnn\": this build has no cuDNN (its headers were not found when it was "
      "configured); use cuda_attention = \"kernel\" or rebuild where cuDNN 9 is installed");
}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::forward(const AttentionShape&, const int64_t*, const int64_t*, int64_t, int64_t,
                             const bf16*, const bf16*, const bf16*, bf16*, float*) {
  return false;
}
void CudnnAttention::backward(const AttentionShape&, const int64_t*, const int64_t*, int64_t, int64_t,
                              int64_t, const bf16*, const bf16*, const bf16*, const bf16*, const float*,
                              const bf16*, bf16*, bf16*, bf16*) {}
size_t CudnnAttention::plans_built() const {
  return 0;
}
std::vector<const void*> CudnnAttention::scratch_addresses() const {
  return {};
}
size_t CudnnAttention::plans_reused() const {
  return 0;
}
size_t CudnnAttention::library_version() const {
  return 0;
}
void CudnnAttention::validate_graphs(const SdpaShapeKey&) {
  throw sdk::Error(MLPT_FAILED_PRECONDITION, "cuDNN attention graphs: this build has no cuDNN");
}

}  // namespace mlpt::ref::cuda

#endif
