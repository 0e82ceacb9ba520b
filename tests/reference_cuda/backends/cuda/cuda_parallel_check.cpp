// An MPI program (one process per rank; parallel_test.cpp runs it under mpirun -np 2 and -np 4)
// that checks the CUDA model's tensor and expert parallelism (device_model/model.hpp on CudaOps; `--ep E`:
// tp = ranks / E, the routed experts dispatched through host memory over MPI) on the tiny
// config: each rank holds its shard (shard_weights) on the device and runs the packed forward,
// the next-token logprobs, the backward of a fixed function of the hidden states, and generation
// (prefill, then decode steps with device state and paged KV), the embedding and LM head split by
// token ids over the TP ranks (device_model/vocab_head.hpp), the group's sums going through
// `--communicator staged` (MPI, device buffers staged through the host: several ranks may share
// one GPU) or `nccl` (one GPU per rank). Every rank also runs the one-rank CUDA model on the whole
// weights and the CPU model (float32, the oracle). Both sides replay the one-rank CUDA model's
// routing (R3), so bf16 near-ties cannot pick other experts.
//
// World rank 0 prints one JSON line with the measured differences; every rank exits 1 when one
// is past its tolerance (the flags; parallel_test.cpp states the values), the spread of replicated
// tensors' gradients between the ranks included (the same sums, but the device backward's atomics
// add in another order on each rank: the trainer takes TP rank 0's).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cuda/head.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "device_model/model.hpp"
#include "device_model/vocab_head.hpp"
#include "backends/cuda/parallel/host_staging.hpp"
#include "model/model.hpp"
#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/scoring.hpp"
#include "mpi_check_main.hpp"
#ifdef MLPT_TEST_NCCL
#include "backends/cuda/parallel/nccl_communicator.hpp"
#endif

using namespace mlpt::ref;
namespace gpu = mlpt::ref::cuda;
namespace dev = mlpt::ref::dev;

namespace {

struct Tolerances {
  double logprob_max = 0.05, logprob_mean = 0.01;  // |Δ logprob|, at any position / on average
  double grad_cosine = 0.99;                       // per tensor, against the one-rank CUDA model
  double cpu_grad_cosine = 0.98;                   // per tensor, against the CPU model
  double generation_max = 0.05;                    // |Δ logprob| of generation steps
  double replicated_spread = 1e-4;                 // between the ranks, relative to the tensor's largest
};

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0, 41, 64};  // two sequences of 41 and 23 tokens
  std::vector<int32_t> targets;             // next token; 0 at each sequence's last position
  explicit Batch(int64_t vocab) : tokens(64), targets(64, 0) {
    uint64_t x = 12345;
    for (auto& t : tokens) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
    }
    for (size_t s = 0; s + 1 < offsets.size(); ++s)
      for (int64_t t = offsets[s]; t + 1 < offsets[s + 1]; ++t) targets[t] = tokens[t + 1];
  }
  bool scored(int64_t t) const { return t + 1 != offsets[1] && t + 1 != offsets[2]; }
};

// d(hidden): a fixed pseudo-random function of the position, bf16-exact.
std::vector<float> d_hidden_values(size_t n) {
  std::vector<float> d(n);
  for (size_t i = 0; i < n; ++i)
    d[i] = __bfloat162float(__float2bfloat16(static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f));
  return d;
}

// The weights the device holds (bf16 where it keeps bf16), so the CPU model starts from the same values.
Weights<float> bf16_exact(Weights<float> w) {
  for (size_t i = 0; i < w.values.size(); ++i)
    if (!dev::is_fp32_tensor(w.layout, static_cast<int>(i)))
      for (float& x : w.values[i]) x = __bfloat162float(__float2bfloat16(x));
  return w;
}

struct Result {
  std::vector<float> logprobs;    // next-token logprobs, 0 where not scored
  std::vector<float> generation;  // logprobs of the generation steps' tokens
  std::vector<int16_t> experts;   // the routing the forward used
  Weights<float> grads;
};

// Through the vocabulary-parallel head (device_model/vocab_head.hpp): a shard's range of the
// logits, the rows' log-softmax combined over the TP group `tensor` (NULL for one rank).
std::vector<float> logprobs_of(gpu::CudaOps& ops, const dev::DeviceWeights& w, const gpu::bf16* hidden,
                               const std::vector<int32_t>& targets, Communicator* tensor) {
  const gpu::Context& ctx = ops.context();
  dev::VocabHead head(w.config, tensor, w.config.vocab_size);
  const int64_t n = static_cast<int64_t>(targets.size()), V = head.width(), H = w.config.hidden_size;
  const std::vector<int32_t> local = dev::vocab_local_ids(head.range(), targets);
  gpu::DeviceBuffer logits(size_t(n * V) * 4), lp(size_t(n) * 4), lse(size_t(n) * 4), t(size_t(n) * 4);
  gpu::check(cudaMemcpyAsync(t.get(), local.data(), size_t(n) * 4, cudaMemcpyHostToDevice, ctx.stream), "targets");
  gpu::logits_forward(ctx, n, V, H, hidden, gpu::as_cuda(w.bf(w.layout.lm_head)), logits.as<float>());
  head.logprobs(ops, n, logits.as<float>(), t.as<int32_t>(), lp.as<float>(), lse.as<float>());
  std::vector<float> out(static_cast<size_t>(n));
  gpu::check(cudaMemcpyAsync(out.data(), lp.get(), size_t(n) * 4, cudaMemcpyDeviceToHost, ctx.stream), "logprobs");
  gpu::check(cudaStreamSynchronize(ctx.stream), "logprobs");
  return out;
}

// Prefill of both sequences' first 30 and 15 tokens in one batch, then 4 decode steps of one token
// each (recurrent GDN, paged attention): the logprobs of every step's next tokens.
std::vector<float> generate(gpu::CudaOps& ops, const dev::DeviceWeights& w, const Batch& b,
                            const ModelParallel* parallel, dev::Workspace& ws) {
  dev::KvCache kv(ops, w.config, 6, 16);
  dev::DeviceSequenceState first(ops, w.config), second(ops, w.config);
  first.blocks = {0, 2, 4};
  second.blocks = {5, 3, 1};
  std::vector<float> out;
  auto step = [&](std::vector<int32_t> ids, int64_t split, std::vector<int32_t> next) {
    dev::DeviceBatch db;
    db.tokens = std::move(ids);
    db.offsets = {0, split, static_cast<int64_t>(db.tokens.size())};
    db.states = {&first, &second};
    db.kv = &kv;
    db.chunked = db.tokens.size() > 2;
    db.parallel = parallel;
    Buffer hidden;
    dev::forward_hidden(ops, w, db, ws, hidden, nullptr);
    const std::vector<float> lp =
        logprobs_of(ops, w, gpu::as_cuda(hidden.as<bf16>()), next, parallel ? parallel->tensor : nullptr);
    out.insert(out.end(), lp.begin(), lp.end());
  };
  const int64_t o = b.offsets[1];
  std::vector<int32_t> prefill(b.tokens.begin(), b.tokens.begin() + 30), next(b.tokens.begin() + 1, b.tokens.begin() + 31);
  prefill.insert(prefill.end(), b.tokens.begin() + o, b.tokens.begin() + o + 15);
  next.insert(next.end(), b.tokens.begin() + o + 1, b.tokens.begin() + o + 16);
  step(prefill, 30, next);
  for (int i = 0; i < 4; ++i)
    step({b.tokens[size_t(30 + i)], b.tokens[size_t(o + 15 + i)]}, 1,
         {b.tokens[size_t(31 + i)], b.tokens[size_t(o + 16 + i)]});
  return out;
}

Result run_cuda(gpu::CudaOps& ops, const Weights<float>& w, const Batch& b, const std::vector<int16_t>* replay,
                const ModelParallel* parallel) {
  const gpu::Context& ctx = ops.context();
  const dev::DeviceWeights dw = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();
  const ModelConfig& c = w.config;
  const int64_t N = b.offsets.back(), H = c.hidden_size;
  Result r;
  r.experts.assign(size_t(N * c.num_layers * c.experts_per_token), -1);
  dev::DeviceBatch db;
  db.tokens = b.tokens;
  db.offsets = b.offsets;
  db.replay_experts = replay ? replay->data() : nullptr;
  db.routed_experts = r.experts.data();
  db.parallel = parallel;
  Buffer hidden, inputs;
  dev::forward_hidden(ops, dw, db, *ws, hidden, &inputs);
  r.logprobs = logprobs_of(ops, dw, gpu::as_cuda(hidden.as<bf16>()), b.targets, parallel ? parallel->tensor : nullptr);
  for (int64_t t = 0; t < N; ++t)
    if (!b.scored(t)) r.logprobs[size_t(t)] = 0;

  std::vector<Buffer> grads;
  for (const auto& v : w.values) {
    grads.emplace_back(ops, std::max<size_t>(v.size(), 1) * 4);
    gpu::check(cudaMemsetAsync(grads.back().get(), 0, grads.back().bytes(), ctx.stream), "zero gradients");
  }
  std::vector<gpu::bf16> dh;
  for (float x : d_hidden_values(size_t(N * H))) dh.push_back(__float2bfloat16(x));
  gpu::DeviceBuffer d_hidden(dh.size() * 2);
  gpu::check(cudaMemcpyAsync(d_hidden.get(), dh.data(), dh.size() * 2, cudaMemcpyHostToDevice, ctx.stream), "d_hidden");
  db.routed_experts = nullptr;
  dev::backward(ops, dw, db, inputs, r.experts.data(), d_hidden.as<bf16>(), grads, true, *ws);
  r.grads = Weights<float>{w.config, w.layout, {}};
  for (size_t i = 0; i < w.values.size(); ++i) {
    r.grads.values.emplace_back(w.values[i].size());
    gpu::check(cudaMemcpy(r.grads.values[i].data(), grads[i].get(), w.values[i].size() * 4, cudaMemcpyDeviceToHost),
               "gradients");
  }
  r.generation = generate(ops, dw, b, parallel, *ws);
  return r;
}

// The CPU model's logprobs and gradients of the same function, replaying `experts`.
Result run_cpu(const Weights<float>& w, const Batch& b, const std::vector<int16_t>& experts) {
  const int64_t N = b.offsets.back();
  ForwardBatch<float> fb;
  fb.tokens = b.tokens.data();
  fb.offsets = b.offsets;
  fb.replay_experts = experts.data();
  std::vector<float> inputs;
  fb.layer_inputs = &inputs;
  const std::vector<float> hidden = forward_hidden(w, fb);
  Result r;
  r.grads = zeros_like_layout<float>(w.config);
  fb.layer_inputs = nullptr;
  const std::vector<float> dh = d_hidden_values(hidden.size());
  backward(w, fb, inputs, experts.data(), dh.data(), r.grads, BackwardOptions{});
  ForwardBatch<float> s;
  s.tokens = b.tokens.data();
  s.offsets = b.offsets;
  s.replay_experts = experts.data();
  const std::vector<double> lp = score_sequences(w, s, w.config.vocab_size).logprobs;
  r.logprobs.assign(size_t(N), 0.f);
  for (int64_t t = 0; t < N; ++t)  // score_sequences: logprobs[t] is token t's, given the tokens before it
    if (b.scored(t)) r.logprobs[size_t(t)] = static_cast<float>(lp[size_t(t + 1)]);
  return r;
}

struct LogprobDiff {
  double max = 0, mean = 0;
};
LogprobDiff compare(const std::vector<float>& a, const std::vector<float>& b) {
  LogprobDiff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - double(b[i]));
    d.max = std::max(d.max, e), d.mean += e;
  }
  d.mean /= double(std::max<size_t>(a.size(), 1));
  return d;
}

// The smallest cosine similarity of any tensor's gradient with the reference's (both zero: 1).
double min_cosine(const Weights<float>& got, const Weights<float>& ref, std::string* worst_name) {
  double worst = 1;
  for (size_t i = 0; i < ref.values.size(); ++i) {
    double dot = 0, na = 0, nb = 0;
    for (size_t j = 0; j < ref.values[i].size(); ++j) {
      const double a = got.values[i][j], r = ref.values[i][j];
      dot += a * r, na += a * a, nb += r * r;
    }
    const double cosine = (na == 0 && nb == 0) ? 1.0 : dot / std::sqrt(na * nb + 1e-300);
    if (cosine < worst) worst = cosine, *worst_name = ref.layout.tensors[i].name;
  }
  return worst;
}

// For the tensors the shard holds whole (the same size as the full model's: replicated), the
// largest difference of a gradient element between the ranks of `comm`, relative to the tensor's
// largest element.
double replicated_gradient_spread(const Weights<float>& shard_grads, const ModelLayout& full, MPI_Comm comm,
                                  std::string* worst_name) {
  double worst = 0;
  for (size_t i = 0; i < shard_grads.values.size(); ++i) {
    const std::vector<float>& g = shard_grads.values[i];
    if (static_cast<int64_t>(g.size()) != full.tensors[i].numel() || g.empty()) continue;
    std::vector<float> lo(g.size()), hi(g.size());
    MPI_Allreduce(g.data(), lo.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_MIN, comm);
    MPI_Allreduce(g.data(), hi.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_MAX, comm);
    double spread = 0, scale = 1e-30;
    for (size_t j = 0; j < g.size(); ++j)
      spread = std::max(spread, double(hi[j]) - lo[j]), scale = std::max({scale, std::fabs(double(hi[j])), std::fabs(double(lo[j]))});
    if (spread / scale > worst) worst = spread / scale, *worst_name = full.tensors[i].name;
  }
  return worst;
}

int check(int argc, char** argv) {
  std::string config_path, communicator = "staged";
  int ep = 1;
  Tolerances tol;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") config_path = value();
    else if (a == "--communicator") communicator = value();
    else if (a == "--ep") ep = std::stoi(value());
    else if (a == "--logprob-max") tol.logprob_max = std::stod(value());
    else if (a == "--logprob-mean") tol.logprob_mean = std::stod(value());
    else if (a == "--grad-cosine") tol.grad_cosine = std::stod(value());
    else if (a == "--cpu-grad-cosine") tol.cpu_grad_cosine = std::stod(value());
    else if (a == "--generation-max") tol.generation_max = std::stod(value());
    else if (a == "--replicated-spread") tol.replicated_spread = std::stod(value());
    else throw std::runtime_error("unknown argument " + a);
  }
  int world = 1, rank = 0, devices = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gpu::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = communicator == "nccl" ? rank : rank % devices;  // staged ranks may share a GPU
  gpu::select_device(device, "cuda_parallel_check");
  if (ep < 1 || world % ep != 0) throw std::runtime_error("--ep " + std::to_string(ep) + " does not divide the world");
  const int tp = world / ep;
  const MpiModelLayout layout(tp, ep);
  gpu::Context ctx = gpu::create_context();
  std::unique_ptr<Communicator> tensor;
  if (tp == 1) {
    // no tensor-parallel group
  } else if (communicator == "staged") {
    tensor = gpu::host_staged_communicator(*layout.groups().tensor, ctx.stream);
  } else if (communicator == "nccl") {
#ifdef MLPT_TEST_NCCL
    if (ep != 1) throw std::runtime_error("--communicator nccl takes the whole world as the TP group (--ep 1)");
    gpu::NcclCommunicator::Id id{};
    if (rank == 0) id = gpu::NcclCommunicator::new_id();
    MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    tensor = std::make_unique<gpu::NcclCommunicator>(id, rank, world, ctx.stream);
#else
    throw std::runtime_error("--communicator nccl: built without NCCL");
#endif
  } else {
    throw std::runtime_error("--communicator must be staged or nccl, not " + communicator);
  }
  const ModelParallel groups{tensor.get(), layout.groups().expert, layout.groups().routed};  // expert groups: MPI, host memory

  const ModelShard shard = layout.shard();  // the vocabulary split over the TP ranks too
  const ModelConfig config = load_model_config(config_path);
  const Weights<float> full = bf16_exact(init_weights<float>(config, 1234));
  const Batch batch(config.vocab_size);
  gpu::CudaOps ops(ctx);
  const Result one = run_cuda(ops, full, batch, nullptr, nullptr);
  const Result many = run_cuda(ops, shard_weights(full, shard), batch, &one.experts, &groups);
  const Result cpu = run_cpu(full, batch, one.experts);

  const LogprobDiff vs_one = compare(many.logprobs, one.logprobs), vs_cpu = compare(many.logprobs, cpu.logprobs);
  const LogprobDiff generation = compare(many.generation, one.generation);
  std::string worst_one, worst_cpu, worst_replicated;
  const double cos_one = min_cosine(many.grads, shard_weights(one.grads, shard), &worst_one);
  const double cos_cpu = min_cosine(many.grads, shard_weights(cpu.grads, shard), &worst_cpu);
  const double spread = replicated_gradient_spread(many.grads, full.layout, MPI_COMM_WORLD, &worst_replicated);
  const bool experts_replayed = many.experts == one.experts;
  const bool ok = vs_one.max <= tol.logprob_max && vs_one.mean <= tol.logprob_mean && vs_cpu.max <= tol.logprob_max &&
                  vs_cpu.mean <= tol.logprob_mean && generation.max <= tol.generation_max &&
                  cos_one >= tol.grad_cosine && cos_cpu >= tol.cpu_grad_cosine && spread <= tol.replicated_spread && experts_replayed;
  int failed = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::cout << nlohmann::json{{"config", config_path},
                                {"tp", tp},
                                {"ep", ep},
                                {"communicator", communicator},
                                {"devices", devices},
                                {"max_logprob_diff_one_rank", vs_one.max},
                                {"mean_logprob_diff_one_rank", vs_one.mean},
                                {"max_logprob_diff_cpu", vs_cpu.max},
                                {"mean_logprob_diff_cpu", vs_cpu.mean},
                                {"max_generation_logprob_diff", generation.max},
                                {"min_grad_cosine_one_rank", cos_one},
                                {"worst_tensor_one_rank", worst_one},
                                {"min_grad_cosine_cpu", cos_cpu},
                                {"worst_tensor_cpu", worst_cpu},
                                {"replicated_gradient_spread", spread},
                                {"worst_replicated_tensor", worst_replicated},
                                {"experts_replayed", experts_replayed},
                                {"ok", any == 0}}
                     .dump()
              << std::endl;
  tensor.reset();
  gpu::destroy_context(ctx);
  return any;
}

}  // namespace

int main(int argc, char** argv) { return mlpt_test::mpi_check_main(argc, argv, "cuda_parallel_check", check); }
