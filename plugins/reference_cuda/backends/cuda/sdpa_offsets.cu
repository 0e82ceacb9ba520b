#include <algorithm>

#include "backends/cuda/sdpa_offsets.hpp"

namespace mlpt::ref::cuda {

namespace {

size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

__global__ void sequence_inputs_kernel(const int64_t* q_offsets, const int64_t* kv_offsets, int64_t num_seqs,
                                       int64_t heads, int64_t kv_heads, int64_t head_dim,
                                       SdpaSequenceInputs out) {
  const int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (s > num_seqs) return;
  out.q_rows[s] = q_offsets[s] * heads * head_dim;
  out.kv_rows[s] = kv_offsets[s] * kv_heads * head_dim;
  out.stats_rows[s] = q_offsets[s] * heads;
  if (s < num_seqs) {
    out.q_lengths[s] = static_cast<int32_t>(q_offsets[s + 1] - q_offsets[s]);
    out.kv_lengths[s] = static_cast<int32_t>(kv_offsets[s + 1] - kv_offsets[s]);
  }
}

__global__ void paged_inputs_kernel(const int64_t* q_offsets, const int64_t* kv_lengths, const int32_t* table,
                                    int64_t max_blocks, int64_t num_seqs, int64_t width, int64_t heads,
                                    int64_t head_dim, SdpaPagedInputs out) {
  const int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (x < num_seqs * width) {
    const int64_t s = x / width, c = x % width;
    out.table[x] = c < max_blocks ? table[s * max_blocks + c] : 0;
  }
  if (x <= num_seqs) {
    out.q_rows[x] = q_offsets[x] * heads * head_dim;
    out.stats_rows[x] = q_offsets[x] * heads;
    if (x < num_seqs) {
      out.q_lengths[x] = static_cast<int32_t>(q_offsets[x + 1] - q_offsets[x]);
      out.kv_lengths[x] = static_cast<int32_t>(kv_lengths[x]);
    }
  }
}

}  // namespace

size_t SdpaPagedInputs::bytes(int64_t num_seqs, int64_t table_width) {
  return 2 * aligned(size_t(num_seqs) * sizeof(int32_t)) +
         2 * aligned(size_t(num_seqs + 1) * sizeof(int64_t)) +
         aligned(size_t(num_seqs * table_width) * sizeof(int32_t));
}

SdpaPagedInputs SdpaPagedInputs::carve(void* base, int64_t num_seqs, int64_t table_width) {
  (void)table_width;
  char* p = static_cast<char*>(base);
  const size_t lengths = aligned(size_t(num_seqs) * sizeof(int32_t));
  const size_t rows = aligned(size_t(num_seqs + 1) * sizeof(int64_t));
  SdpaPagedInputs in;
  in.q_lengths = reinterpret_cast<int32_t*>(p);
  in.kv_lengths = reinterpret_cast<int32_t*>(p + lengths);
  in.q_rows = reinterpret_cast<int64_t*>(p + 2 * lengths);
  in.stats_rows = reinterpret_cast<int64_t*>(p + 2 * lengths + rows);
  in.table = reinterpret_cast<int32_t*>(p + 2 * lengths + 2 * rows);
  return in;
}

void sdpa_paged_inputs(const Context& ctx, const int64_t* q_offsets, const int64_t* kv_lengths,
                       const int32_t* block_table, int64_t max_blocks, int64_t num_seqs, int64_t table_width,
                       int64_t heads, int64_t head_dim, const SdpaPagedInputs& out) {
  const int threads = 128;
  const int64_t n = std::max(num_seqs + 1, num_seqs * table_width);
  paged_inputs_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, ctx.stream>>>(
      q_offsets, kv_lengths, block_table, max_blocks, num_seqs, table_width, heads, head_dim, out);
  check_launch("sdpa_paged_inputs");
}

size_t SdpaSequenceInputs::bytes(int64_t num_seqs) {
  return 2 * aligned(size_t(num_seqs) * sizeof(int32_t)) +
         3 * aligned(size_t(num_seqs + 1) * sizeof(int64_t));
}

SdpaSequenceInputs SdpaSequenceInputs::carve(void* base, int64_t num_seqs) {
  char* p = static_cast<char*>(base);
  const size_t lengths = aligned(size_t(num_seqs) * sizeof(int32_t));
  const size_t rows = aligned(size_t(num_seqs + 1) * sizeof(int64_t));
  SdpaSequenceInputs in;
  in.q_lengths = reinterpret_cast<int32_t*>(p);
  in.kv_lengths = reinterpret_cast<int32_t*>(p + lengths);
  in.q_rows = reinterpret_cast<int64_t*>(p + 2 * lengths);
  in.kv_rows = reinterpret_cast<int64_t*>(p + 2 * lengths + rows);
  in.stats_rows = reinterpret_cast<int64_t*>(p + 2 * lengths + 2 * rows);
  return in;
}

void sdpa_sequence_inputs(const Context& ctx, const int64_t* q_offsets, const int64_t* kv_offsets,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t head_dim,
                          const SdpaSequenceInputs& out) {
  const int threads = 128;
  const auto blocks = static_cast<unsigned>((num_seqs + 1 + threads - 1) / threads);
  sequence_inputs_kernel<<<blocks, threads, 0, ctx.stream>>>(q_offsets, kv_offsets, num_seqs, heads, kv_heads,
                                                             head_dim, out);
  check_launch("sdpa_sequence_inputs");
}

}  // namespace mlpt::ref::cuda
