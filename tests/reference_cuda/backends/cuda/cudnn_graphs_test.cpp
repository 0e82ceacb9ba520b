// cuDNN's fused attention graphs (backends/cuda/cudnn_attention.hpp) checked where no GPU is: every
// tensor, operation and operation graph of the forward, backward and paged forward is finalized by the cuDNN
// this machine has, which checks each product's, mask's and reduction's shapes and types against the others
// (a wrong dimension fails here with cuDNN's own reason). What needs a GPU (the heuristics' engine, the plan,
// the numbers) is library_paths_test.cpp's. Where cuDNN cannot be loaded the checks are reported as not run.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_attention.hpp"
#include "device_model/sdpa_plan.hpp"
#include "mlpt/sdk/error.hpp"

using namespace mlpt::ref;
using cuda::CudnnAttention;

namespace {

// Whether this machine's cuDNN loads; the reason when it does not.
bool cudnn_loads(std::string& why) {
  try {
    CudnnAttention::validate_graphs(sdpa_shape_key(SdpaPass::forward, 1, 1, 8, 1, 1, 1, "probe"));
    return true;
  } catch (const mlpt::sdk::Error& e) {
    if (e.code() != MLPT_FAILED_PRECONDITION) throw;
    why = e.what();
    return false;
  }
}

}  // namespace

TEST_CASE("cudnn attention graphs: the model's forward and backward graphs are accepted by cuDNN") {
  std::string why;
  if (!cudnn_loads(why)) {
    WARN("not run: " << why);
    return;
  }
  struct Shape {
    int64_t heads, kv_heads, head_dim, sequences, tokens;
  };
  // The bench model (16/2 heads of 256), the test configs' grouped and plain heads, one 64k prompt,
  // a packed micro-batch, a single token.
  for (const Shape& s : std::vector<Shape>{{16, 2, 256, 4, 4096},
                                           {16, 2, 256, 1, 65536},
                                           {8, 2, 256, 2, 1537},
                                           {4, 4, 64, 3, 195},
                                           {4, 1, 32, 1, 1}})
    for (SdpaPass pass : {SdpaPass::forward, SdpaPass::backward}) {
      const SdpaShapeKey key =
          sdpa_shape_key(pass, s.heads, s.kv_heads, s.head_dim, s.sequences, s.tokens, s.tokens, "attention");
      INFO(describe(key));
      CHECK_NOTHROW(CudnnAttention::validate_graphs(key));
    }
  // Against the paged cache: decode of 32 sequences, a packed prefill with state, a 64k prompt;
  // the pools described as large as an H200's memory could hold.
  struct Paged {
    int64_t heads, kv_heads, head_dim, sequences, tokens, table_columns, block_size;
  };
  for (const Paged& s : std::vector<Paged>{
           {16, 2, 256, 32, 32, 5, 64}, {4, 4, 64, 3, 195, 9, 16}, {16, 2, 256, 1, 65536, 1024, 64}}) {
    const SdpaShapeKey key = sdpa_paged_key(s.heads, s.kv_heads, s.head_dim, s.sequences, s.tokens,
                                            s.table_columns, s.block_size, size_t(141) << 30, "attention");
    INFO(describe(key));
    CHECK_NOTHROW(CudnnAttention::validate_graphs(key));
  }
}

TEST_CASE("cudnn attention graphs: without a GPU the library path fails naming the cuDNN call") {
  std::string why;
  if (!cudnn_loads(why)) {
    WARN("not run: " << why);
    return;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    WARN("not run: this machine has a GPU (library_paths_test.cpp runs the path there)");
    return;
  }
  try {
    CudnnAttention a(nullptr);
    FAIL("a cuDNN handle was made without a GPU");
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("cudnnCreate"));
    CHECK_THAT(std::string(e.what()), Catch::Contains("CUDNN_STATUS_"));
  }
}
