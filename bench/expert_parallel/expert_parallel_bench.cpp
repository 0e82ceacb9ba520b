// bench_expert_parallel [--configs tiny,small-100m] [--ep 2,4] [--tokens 512] [--seconds 2]
// The cost of expert parallelism's token exchange against the expert compute it hides, for one
// MoE layer's routed experts (model/parallel/expert_dispatch): started without an MPI launcher it
// runs itself under `mpirun -np P` for each P of --ep, one JSON line per (config, P). In every
// rank, same process: the layer on one rank (all experts, all tokens: the baseline), and the layer
// under EP with the communicator timed (exchange: counts, all-to-all there and back, the final
// all-gather, waiting for slower ranks included; compute: the rest), and the same collectives
// replayed alone (transfer: the bytes moving, no rank waiting on another's compute). Reported:
// transfer / compute (what a transport must overlap or undercut), exchange / compute, and the
// one-rank time / EP time. The ranks share
// this machine's cores (--oversubscribe), so the EP speedup here is a floor, not a cluster's.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/moe.hpp"
#include "model/config.hpp"
#include "model/parallel/expert_dispatch.hpp"
#include "model/parallel/mpi_communicator.hpp"

using namespace mlpt::ref;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One collective as the dispatch made it: which, and its per-rank counts.
struct Collective {
  enum Kind { all_to_all, all_gather, counts } kind;
  std::vector<size_t> send, recv;
};

// Forwards every collective to `inner`, adding up the time spent in them; records the calls while
// `recording` so the same traffic can be replayed alone.
class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce_sum(float* v, size_t n) override { timed([&] { inner_.all_reduce_sum(v, n); }); }
  void all_to_all_v(const float* s, const size_t* sc, float* r, const size_t* rc) override {
    record(Collective::all_to_all, sc, rc);
    timed([&] { inner_.all_to_all_v(s, sc, r, rc); });
  }
  void all_gather_v(const float* s, size_t n, float* r, const size_t* rc) override {
    record(Collective::all_gather, &n, rc);
    timed([&] { inner_.all_gather_v(s, n, r, rc); });
  }
  void exchange_counts(const size_t* s, size_t* r) override {
    record(Collective::counts, s, s);
    timed([&] { inner_.exchange_counts(s, r); });
  }
  double seconds = 0;
  bool recording = false;
  std::vector<Collective> calls;

 private:
  void record(Collective::Kind kind, const size_t* send, const size_t* recv) {
    if (!recording) return;
    const size_t n = static_cast<size_t>(size());
    calls.push_back({kind, std::vector<size_t>(send, send + (kind == Collective::all_gather ? 1 : n)),
                     std::vector<size_t>(recv, recv + n)});
  }
  template <class F>
  void timed(F f) {
    const auto t0 = Clock::now();
    f();
    seconds += seconds_since(t0);
  }
  Communicator& inner_;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

std::string option(int argc, char** argv, const std::string& key, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + key) return argv[i + 1];
  return fallback;
}

// One (config, P) measurement in this rank; world rank 0 prints it.
void measure(const std::string& name, int64_t tokens, double min_seconds, MpiModelLayout& layout) {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json");
  const int64_t H = c.hidden_size, E = c.num_experts, k = c.experts_per_token, I = c.moe_intermediate;
  Communicator& group = *layout.groups().expert;
  const int P = group.size();
  const int64_t per_rank = E / P;
  // The same inputs on every rank (fixed seed): activations, router logits, all experts' weights.
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(tokens * H)), logits(static_cast<size_t>(tokens * E));
  std::vector<float> gate_up(static_cast<size_t>(E * 2 * I * H)), down(static_cast<size_t>(E * H * I));
  for (auto* v : {&x, &logits, &gate_up, &down})
    for (float& f : *v) f = normal(gen) * (v == &logits ? 50.0f : 1.0f);
  const cpu::MoeShape shape{H, E, k, I, c.norm_topk_prob};
  std::vector<int16_t> experts(static_cast<size_t>(tokens * k));
  std::vector<float> weights(static_cast<size_t>(tokens * k)), y(static_cast<size_t>(tokens * H));
  cpu::route(shape, tokens, logits.data(), static_cast<const int16_t*>(nullptr), experts.data(), weights.data());
  const int64_t e0 = group.rank() * per_rank;
  const std::vector<float> my_gate_up(gate_up.begin() + e0 * 2 * I * H, gate_up.begin() + (e0 + per_rank) * 2 * I * H);
  const std::vector<float> my_down(down.begin() + e0 * H * I, down.begin() + (e0 + per_rank) * H * I);

  auto repeat = [&](auto step) {  // seconds per step, at least min_seconds of steps (every rank the same count)
    int reps = 0;
    const auto t0 = Clock::now();
    for (;;) {
      step();
      ++reps;
      int done = seconds_since(t0) >= min_seconds ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (done) break;
    }
    return std::make_pair(seconds_since(t0) / reps, reps);
  };
  auto [one_rank, one_reps] = repeat([&] {
    std::fill(y.begin(), y.end(), 0.0f);
    cpu::experts_forward(shape, tokens, x.data(), experts.data(), weights.data(), gate_up.data(), down.data(), y.data());
  });
  TimedCommunicator timed(group);
  timed.recording = true;  // the first step's traffic, replayed alone below
  std::fill(y.begin(), y.end(), 0.0f);
  dispatched_experts_forward(timed, &timed, shape, tokens, x.data(), experts.data(), weights.data(), my_gate_up.data(),
                             my_down.data(), y.data());
  timed.recording = false;
  timed.seconds = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  auto [ep, ep_reps] = repeat([&] {
    std::fill(y.begin(), y.end(), 0.0f);
    dispatched_experts_forward(timed, &timed, shape, tokens, x.data(), experts.data(), weights.data(), my_gate_up.data(),
                               my_down.data(), y.data());
  });
  // The same collectives with nothing between them: the transfer itself, without waiting for a
  // slower rank's compute (ranks start each step together).
  std::vector<float> send_buffer, recv_buffer;
  std::vector<size_t> scratch(static_cast<size_t>(P));
  auto [transfer, transfer_reps] = repeat([&] {
    MPI_Barrier(MPI_COMM_WORLD);
    for (const Collective& call : timed.calls) {
      size_t sent = 0, received = 0;
      for (size_t v : call.send) sent += v;
      for (size_t v : call.recv) received += v;
      send_buffer.resize(std::max<size_t>(sent, 1));
      recv_buffer.resize(std::max<size_t>(received, 1));
      if (call.kind == Collective::all_to_all)
        group.all_to_all_v(send_buffer.data(), call.send.data(), recv_buffer.data(), call.recv.data());
      else if (call.kind == Collective::all_gather)
        group.all_gather_v(send_buffer.data(), call.send[0], recv_buffer.data(), call.recv.data());
      else
        group.exchange_counts(call.send.data(), scratch.data());
    }
  });
  (void)transfer_reps;
  double exchange = timed.seconds / ep_reps, worst_exchange = exchange;
  MPI_Allreduce(MPI_IN_PLACE, &worst_exchange, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double compute = ep - exchange;
  if (layout.world_rank() == 0)
    std::cout << nlohmann::json{{"config", name},
                                {"ep", P},
                                {"tokens", tokens},
                                {"experts", E},
                                {"top_k", k},
                                {"one_rank_s", one_rank},
                                {"ep_s", ep},
                                {"ep_exchange_s", exchange},
                                {"ep_exchange_s_slowest_rank", worst_exchange},
                                {"ep_compute_s", compute},
                                {"transfer_s", transfer},
                                {"transfer_over_compute", transfer / compute},
                                {"exchange_over_compute", exchange / compute},
                                {"one_rank_over_ep", one_rank / ep},
                                {"reps", ep_reps}}
                     .dump()
              << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto configs = split(option(argc, argv, "configs", "tiny,small-100m"));
    const int64_t tokens = std::stoll(option(argc, argv, "tokens", "512"));
    const double seconds = std::stod(option(argc, argv, "seconds", "2"));
    if (!std::getenv("OMPI_COMM_WORLD_SIZE")) {  // the launcher: one mpirun per EP size
      int status = 0;
      for (const std::string& p : split(option(argc, argv, "ep", "2,4"))) {
        std::string cmd = std::string(MPIRUN_EXE) + " --allow-run-as-root --oversubscribe --bind-to none -np " + p;
        for (int i = 0; i < argc; ++i) cmd += std::string(" '") + argv[i] + "'";
        status |= std::system(cmd.c_str());
      }
      return status == 0 ? 0 : 1;
    }
    MpiModelLayout layout(1, std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
    for (const auto& name : configs) measure(name, tokens, seconds, layout);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_expert_parallel: " << e.what() << "\n";
    return 1;
  }
}
