#include "device_model/sdpa_plan.hpp"

#include <algorithm>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

int64_t sdpa_length_bucket(int64_t tokens) {
  int64_t b = 64;
  while (b < tokens) b *= 2;
  return b;
}

SdpaShapeKey sdpa_shape_key(SdpaPass pass, int64_t heads, int64_t kv_heads, int64_t head_dim,
                            int64_t num_seqs, int64_t q_tokens, int64_t kv_tokens, const char* what) {
  auto refuse = [&](const std::string& why) {
    throw sdk::Error(MLPT_INVALID_ARGUMENT, std::string(what) + ": " + why);
  };
  if (num_seqs <= 0 || q_tokens <= 0 || kv_tokens <= 0)
    refuse("needs at least one sequence and one token (sequences " + std::to_string(num_seqs) +
           ", q tokens " + std::to_string(q_tokens) + ", kv tokens " + std::to_string(kv_tokens) + ")");
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    refuse("query heads (" + std::to_string(heads) + ") must be a multiple of kv heads (" +
           std::to_string(kv_heads) + ")");
  if (head_dim <= 0 || head_dim % 8 != 0)
    refuse("head_dim " + std::to_string(head_dim) + " is not a positive multiple of 8");
  return {pass,     num_seqs, sdpa_length_bucket(q_tokens), sdpa_length_bucket(kv_tokens), heads,
          kv_heads, head_dim};
}

SdpaShapeKey sdpa_paged_key(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t num_seqs,
                            int64_t q_tokens, int64_t max_blocks, int64_t block_size, size_t device_bytes,
                            const char* what) {
  if (max_blocks <= 0 || block_size <= 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, std::string(what) +
                                                ": the block table needs at least one column of " +
                                                "at least one token (columns " + std::to_string(max_blocks) +
                                                ", block size " + std::to_string(block_size) + ")");
  SdpaShapeKey k = sdpa_shape_key(SdpaPass::paged_forward, heads, kv_heads, head_dim, num_seqs, q_tokens,
                                  max_blocks * block_size, what);
  k.block_size = block_size;
  k.table_width = 1;
  while (k.table_width < max_blocks) k.table_width *= 2;
  k.max_kv = k.table_width * block_size;
  k.max_q = std::min(k.max_q, k.max_kv);  // a sequence's queries are among its keys
  k.pool_blocks = std::max<int64_t>(1, int64_t(device_bytes / size_t(block_size * kv_heads * head_dim * 2)));
  return k;
}

std::string describe(const SdpaShapeKey& k) {
  const char* pass = k.pass == SdpaPass::backward  ? "backward"
                     : k.pass == SdpaPass::forward ? "forward"
                                                   : "paged forward";
  std::string d = std::string(pass) + ": " + std::to_string(k.batch) +
                  " sequences, q <= " + std::to_string(k.max_q) + ", kv <= " + std::to_string(k.max_kv) +
                  " tokens, " + std::to_string(k.heads) + "/" + std::to_string(k.kv_heads) +
                  " heads, head_dim " + std::to_string(k.head_dim);
  if (k.pass == SdpaPass::paged_forward)
    d += ", blocks of " + std::to_string(k.block_size) + " tokens, table width " +
         std::to_string(k.table_width);
  return d;
}

namespace {

size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

SdpaBackwardScratch sdpa_backward_scratch(const SdpaShapeKey& k, int64_t q_tokens, int64_t kv_tokens) {
  // Whole tiles of 128 rows: a tile that overhangs the last sequence stays inside its own region.
  q_tokens = (q_tokens + 127) / 128 * 128;
  kv_tokens = (kv_tokens + 127) / 128 * 128;
  SdpaBackwardScratch s;
  s.row_sums = aligned(size_t(q_tokens * k.heads) * sizeof(float));
  s.dq_accum = aligned(size_t(q_tokens * k.heads * k.head_dim) * sizeof(float));
  if (k.heads != k.kv_heads) {
    s.dk_per_head = aligned(size_t(kv_tokens * k.heads * k.head_dim) * sizeof(float));
    s.dv_per_head = s.dk_per_head;
  }
  s.total = s.row_sums + s.dq_accum + s.dk_per_head + s.dv_per_head;
  return s;
}

void sdpa_lengths(const int64_t* offsets, int64_t num_seqs, int32_t* lengths) {
  for (int64_t s = 0; s < num_seqs; ++s) lengths[s] = static_cast<int32_t>(offsets[s + 1] - offsets[s]);
}

void sdpa_ragged_offsets(const int64_t* offsets, int64_t num_seqs, int64_t row_elems, int64_t* ragged) {
  for (int64_t s = 0; s <= num_seqs; ++s) ragged[s] = offsets[s] * row_elems;
}

}  // namespace mlpt::ref
