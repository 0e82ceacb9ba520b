// `mlpt model`: make and inspect reference-model checkpoints.
//   mlpt model init --config FILE --seed N --out DIR [--tokenizer DIR] [--dtype D] [--shard-bytes N]
//   mlpt model score --checkpoint DIR [--top N] [--threads N] [--tp T --ep E [--etp 1|T]] [--pp P]
//                    (mpirun -np T·E·P)
//   mlpt model plan --config FILE --trainer tp4,pp2,ep32 --engine tp8,ep8 --nodes N --gpu-mem 288GiB
//                   [--trainer-nodes N] [--gpus-per-node 4] [--context 65536] [--micro-batch-tokens 8192]
//   mlpt model refit-time --config FILE --trainer L --engine L --nodes N --changed-fraction F
//                   [--trainer-nodes N] [--gpus-per-node 4] [--network-gbit 800] [--nvlink-gbyte 900]
//                   [--hbm-gbyte 8000]
// score reads one sequence of token ids per line on stdin (spaces, commas or a JSON array) and
// prints one JSON object per line: {"tokens": [...], "logprobs": [...], "top": [[[id, logprob], ...], ...]}.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "device_model/rank_memory.hpp"
#include "device_model/step_memory.hpp"
#include "model/memory_plan.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"
#ifdef MLPT_REFERENCE_MODEL_MPI
#include "model/parallel/mpi_communicator.hpp"
#endif
#include "model/refit_model.hpp"
#include "model/scoring.hpp"
#include "model/vocabulary.hpp"
#include "model/weights.hpp"
#include "mlpt/sdk/error.hpp"

namespace fs = std::filesystem;
using namespace mlpt::ref;
using mlpt::sdk::Error;

namespace {

const char* kUsage =
    "usage:\n"
    "  mlpt model init --config FILE --seed N --out DIR [--tokenizer DIR] [--dtype float32|bfloat16|float16]\n"
    "                  [--shard-bytes N]\n"
    "  mlpt model score --checkpoint DIR [--top N] [--threads N]   (token ids on stdin, one sequence per line)\n"
    "                  [--tp T --ep E [--etp 1|T]] [--pp P]   (under mpirun -np T*E*P: tensor and expert\n"
    "                  parallel, whole experts over all T*E ranks of a stage or (--etp T) their columns over\n"
    "                  the T, the layers in P pipeline stages; the same output)\n"
    "  mlpt model plan --config FILE --trainer tp4,pp2,ep32 --engine tp8,ep8 --nodes N --gpu-mem 288GiB\n"
    "                  [--trainer-nodes N (default N/4)] [--gpus-per-node 4] [--context 65536]\n"
    "                  [--micro-batch-tokens 8192 (the trainer's: sizes its step)]\n"
    "                  (per-GPU memory; exit status 0 when both plans fit, 3 when either does not)\n"
    "  mlpt model refit-time --config FILE --trainer L --engine L --nodes N --changed-fraction F\n"
    "                  [--trainer-nodes N] [--gpus-per-node 4] [--network-gbit 800 (per GPU)]\n"
    "                  [--nvlink-gbyte 900 (per GPU, one way)] [--hbm-gbyte 8000]   (a model of the refit time)\n";

// --key value pairs; every key must be known.
std::map<std::string, std::string> parse_options(int argc, char** argv, int first,
                                                 const std::vector<std::string>& known) {
  std::map<std::string, std::string> out;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error(MLPT_INVALID_ARGUMENT, "unexpected argument '" + a + "'");
    std::string key = a.substr(2);
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw Error(MLPT_INVALID_ARGUMENT, "unknown option --" + key);
    if (i + 1 >= argc) throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " needs a value");
    out[key] = argv[++i];
  }
  return out;
}

std::string required(const std::map<std::string, std::string>& o, const std::string& key) {
  auto it = o.find(key);
  if (it == o.end()) throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " is required");
  return it->second;
}

int64_t integer(const std::map<std::string, std::string>& o, const std::string& key, int64_t fallback) {
  auto it = o.find(key);
  if (it == o.end()) return fallback;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " expects an integer, got '" + it->second + "'");
  }
}

int init(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2, {"config", "seed", "out", "tokenizer", "dtype", "shard-bytes"});
  std::string config_path = required(o, "config"), out = required(o, "out");
  int64_t seed = integer(o, "seed", -1);
  if (seed < 0) throw Error(MLPT_INVALID_ARGUMENT, "--seed N (a non-negative integer) is required");
  ModelConfig config = load_model_config(config_path);
  if (config.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_INVALID_ARGUMENT, config_path + ": init writes Qwen3.5 checkpoints; model_type must be qwen3_5_moe");
  Dtype dtype = parse_dtype(o.count("dtype") ? o["dtype"] : config.dtype);
  fs::create_directories(out);
  if (o.count("tokenizer")) {
    fs::path tok = o["tokenizer"];
    if (!fs::exists(tok / "tokenizer.json")) throw Error(MLPT_NOT_FOUND, (tok / "tokenizer.json").string() + ": not found");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                          "generation_config.json"})
      if (fs::exists(tok / f)) fs::copy_file(tok / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
    sampling_vocab_size(config, out);  // the tokenizer must fit the LM head
  }
  Weights<float> w = init_weights<float>(config, static_cast<uint64_t>(seed));
  save_checkpoint(out, w, dtype, static_cast<size_t>(integer(o, "shard-bytes", 0)));
  std::cerr << "mlpt model init: " << out << ": " << parameter_count(config) << " parameters, " << dtype_code(dtype)
            << ", seed " << seed << "\n";
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& line, int line_no) {
  std::string s = line;
  for (char& c : s)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(s);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      long long v = std::stoll(word, &used);
      if (used != word.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("id");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(MLPT_INVALID_ARGUMENT, "stdin line " + std::to_string(line_no) + ": '" + word + "' is not a token id");
    }
  }
  return ids;
}

// The ranks the MPI launcher started this process among (from its environment), 1 when none.
int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 1;
}

#ifdef MLPT_REFERENCE_MODEL_MPI
// Held while a layout of several ranks runs (main's error path needs it alive): an error must end
// every rank, not leave them waiting in a collective.
std::unique_ptr<MpiModelLayout> g_layout;
#endif

// With --tp T --ep E --pp P (mpirun -np T·E·P) every rank holds its shard and computes; world rank
// 0 reads stdin (the launcher forwards it there only) and hands each line to the others; the first
// rank of the last pipeline stage (which holds the LM head) prints.
int score(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2, {"checkpoint", "top", "threads", "tp", "ep", "etp", "pp"});
  std::string dir = required(o, "checkpoint");
  int64_t top = integer(o, "top", 0);
  const int64_t tp = integer(o, "tp", 1), ep = integer(o, "ep", 1), etp = integer(o, "etp", 1), pp = integer(o, "pp", 1);
  if (tp < 1 || ep < 1 || pp < 1 || tp * ep * pp > 65536)
    throw Error(MLPT_INVALID_ARGUMENT, "--tp, --ep and --pp must be positive");
  mlpt::ref::cpu::set_cpu_threads(static_cast<int>(integer(o, "threads", 1)));
  const bool parallel = tp * ep * pp > 1 || launched_ranks() > 1;
#ifdef MLPT_REFERENCE_MODEL_MPI
  if (parallel)
    g_layout = std::make_unique<MpiModelLayout>(static_cast<int>(tp), static_cast<int>(ep), static_cast<int>(etp),
                                                static_cast<int>(pp));
  const MpiModelLayout* layout = g_layout.get();
#else
  if (parallel)
    throw Error(MLPT_UNIMPLEMENTED, "--tp " + std::to_string(tp) + " --ep " + std::to_string(ep) + " --pp " +
                                        std::to_string(pp) + " over " +
                                        std::to_string(launched_ranks()) +
                                        " ranks: this mlpt-model was built without MPI (install libopenmpi-dev and rebuild)");
#endif
  ModelShard shard;
  const ModelParallel* groups = nullptr;
#ifdef MLPT_REFERENCE_MODEL_MPI
  if (layout) {
    shard = layout->shard();
    groups = &layout->groups();
  }
#endif
  // A rank of a layout reads its block of the experts only.
  Weights<float> w = groups ? load_shard_weights<float>(dir, shard) : load_weights<float>(dir);
  int64_t valid = sampling_vocab_size(w.config, dir);
  const bool reads = shard.model_rank() == 0, prints = shard.last_stage() && shard.world_rank() == 0;
  std::string line;
  int line_no = 0;
  for (;;) {
    bool have = !reads || static_cast<bool>(std::getline(std::cin, line));
#ifdef MLPT_REFERENCE_MODEL_MPI
    if (layout) have = layout->broadcast_line(line, reads && have);
#endif
    if (!have) break;
    ++line_no;
    std::vector<int32_t> ids = parse_ids(line, line_no);
    if (ids.empty()) continue;
    ForwardBatch<float> b;
    b.tokens = ids.data();
    b.offsets = {0, static_cast<int64_t>(ids.size())};
    b.parallel = groups;
    ScoreResult<float> r = score_sequences(w, b, valid, top);
    if (!prints) continue;
    nlohmann::json out = {{"tokens", ids}, {"logprobs", r.logprobs}};
    if (top > 0) {
      nlohmann::json t = nlohmann::json::array();
      for (auto& row : r.top) {
        nlohmann::json entries = nlohmann::json::array();
        for (auto& [id, lp] : row) entries.push_back({id, lp});
        t.push_back(entries);
      }
      out["top"] = t;
    }
    std::cout << out.dump() << "\n";
  }
#ifdef MLPT_REFERENCE_MODEL_MPI
  g_layout.reset();  // MPI_Finalize: every rank is done
#endif
  return 0;
}

double number(const std::map<std::string, std::string>& o, const std::string& key, double fallback) {
  auto it = o.find(key);
  if (it == o.end()) return fallback;
  try {
    size_t used = 0;
    double v = std::stod(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " expects a number, got '" + it->second + "'");
  }
}

// The options `plan` and `refit-time` share: the two layouts and the machines.
PlanRequest placement(const std::map<std::string, std::string>& o) {
  PlanRequest r;
  r.trainer = parse_parallel_layout(required(o, "trainer"));
  r.engine = parse_parallel_layout(required(o, "engine"));
  r.nodes = integer(o, "nodes", 0);
  r.trainer_nodes = integer(o, "trainer-nodes", 0);
  r.gpus_per_node = integer(o, "gpus-per-node", 4);
  r.context = integer(o, "context", 65536);
  if (r.context <= 0) throw Error(MLPT_INVALID_ARGUMENT, "--context must be positive");
  return r;
}

// Exit status 3 (not 1) when the plan is valid but does not fit: scripts can tell it from an error.
// The same placement as the reference components run it (device_model/rank_memory.hpp): whole
// experts (expert tensor parallel 1) over the EP ranks, which the code forms as tp × (ep / tp) in
// each pipeline stage; the stages' layers cut as the trainer cuts them (pipeline_stages.hpp), so
// the trainer's replicas are world / (tp · ep · pp); the embedding and LM head split over the TP
// ranks (model/parallel/vocab_parallel.hpp). A layout the code refuses says why instead.
// The trainer's step adds what device_model/step_memory.hpp counts for micro-batches of the larger
// of `micro_batch_tokens` and the context: a sequence longer than micro_batch_tokens is a
// micro-batch by itself (split_micro_batches). The 1F1B window saturates at pp micro-batches,
// which any real step has.
// `fits` becomes false where the busiest trainer rank's state and step exceed the GPU's memory.
std::string code_plan(const ModelConfig& config, const PlanRequest& r, int64_t micro_batch_tokens, bool& fits) {
  auto gib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
    return std::string(text);
  };
  std::ostringstream o;
  const int64_t tokens = std::max(micro_batch_tokens, r.context);
  o << "as the reference code runs it (weights, optimizer state, and the trainer's step at " << tokens
    << " tokens a micro-batch: micro_batch_tokens " << micro_batch_tokens << ", and a sequence of " << r.context
    << " tokens is a micro-batch by itself):\n";
  auto one = [&](const char* who, const ParallelLayout& l, int64_t world, bool trainer) {
    try {
      if (l.ep % l.tp != 0 && l.ep != 1)
        throw Error(MLPT_INVALID_ARGUMENT, "ep " + std::to_string(l.ep) + " is not a multiple of tp " + std::to_string(l.tp));
      const int tp = static_cast<int>(l.tp), ep = static_cast<int>(std::max<int64_t>(1, l.ep / l.tp));
      const int pp = trainer ? static_cast<int>(l.pp) : 1;
      if (!trainer && l.pp > 1) throw Error(MLPT_INVALID_ARGUMENT, "the engine runs no pipeline stages (pp " + std::to_string(l.pp) + ")");
      const int dp = trainer ? static_cast<int>(std::max<int64_t>(1, world / (l.tp * ep * pp))) : 1;
      // The trainer folds expert parallelism over data parallelism (MoE parallel folding, as the
      // reference runs it): the dense tensors' optimizer state split over dp · ep replicas.
      const dev::RankMemory m = dev::rank_memory(config, tp, ep, 1, dp, pp, true, /*moe_parallel_folding=*/trainer);
      o << "  " << who << " tensor_parallel " << tp << " x expert_parallel " << ep;
      if (pp > 1) {
        const StageLayers first = stage_layers(config.num_layers, pp, 0), last = stage_layers(config.num_layers, pp, pp - 1);
        o << " x pipeline_parallel " << pp << " (stages of " << first.count() << ".." << last.count() << " layers)";
      }
      o << " (experts whole over " << tp * ep << " ranks"
        << (trainer ? ", " + std::to_string(dp) + " data-parallel replicas, MoE parallel folding" : std::string()) << "): " << m.parameters
        << " parameters on the busiest rank, weights " << gib(m.weights);
      if (trainer) o << ", master " << gib(m.master) << ", gradients " << gib(m.gradients) << ", moments " << gib(m.moments)
                     << ", total " << gib(m.trainer());
      // The step's activations and scratch on the rank whose state and step together are largest.
      ModelShard busiest;
      const dev::StepMemory step = trainer ? dev::busiest_step_memory(config, tp, ep, 1, pp, dp, tokens,
                                                                      pp, /*moe_parallel_folding=*/true, &busiest)
                                           : dev::StepMemory{};
      const double step_rank = trainer ? dev::rank_memory_of(config, busiest, dp, /*moe_parallel_folding=*/true).trainer() : 0;
      // Every component splits the vocabulary over the TP ranks; what keeping it whole would add.
      const double whole_vocab =
          dev::rank_memory(config, tp, ep, 1, dp, pp, false, /*moe_parallel_folding=*/trainer).trainer() - m.trainer();
      if (tp > 1 && trainer)
        o << " [embedding and LM head split over tp; whole they would add " << gib(whole_vocab) << "]";
      else if (tp > 1)
        o << " [embedding and LM head split over tp]";
      o << "\n";
      if (!trainer) return;
      if (step_rank + step.total() > r.gpu_bytes) fits = false;
      o << "    step, busiest rank (stage " << busiest.pp_rank << "): kept layer inputs of " << step.in_flight
        << " micro-batches in flight " << gib(step.kept_inputs) << " (whole [N, H] rows on every TP rank), LM head "
        << gib(step.head) << ", stage messages " << gib(step.messages) << ", workspace and expert-dispatch scratch "
        << gib(step.scratch_bound) << " (an upper bound), optimizer gather " << gib(step.optimizer) << "\n"
        << "    trainer total on that rank " << gib(step_rank + step.total()) << " (state " << gib(step_rank)
        << " + step " << gib(step.total()) << "), "
        << (step_rank + step.total() <= r.gpu_bytes ? "fits" : "DOES NOT FIT") << " in " << gib(r.gpu_bytes)
        << "; estimates: the scratch assumes balanced routing, and the allocator's fragmentation and the "
           "collectives' buffers come on top\n";
    } catch (const Error& e) {
      o << "  " << who << " " << to_string(l) << ": the code refuses it: " << e.what() << "\n";
    }
  };
  const int64_t trainer_nodes = r.trainer_nodes > 0 ? r.trainer_nodes : r.nodes / 4;
  one("trainer", r.trainer, trainer_nodes * r.gpus_per_node, true);
  one("engine", r.engine, 0, false);
  return o.str();
}

int plan(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2,
                         {"config", "trainer", "engine", "nodes", "trainer-nodes", "gpus-per-node", "gpu-mem", "context",
                          "micro-batch-tokens"});
  ModelConfig config = load_model_config(required(o, "config"));
  PlanRequest r = placement(o);
  r.gpu_bytes = parse_bytes(required(o, "gpu-mem"));
  MemoryPlan p = plan_memory(config, r);
  std::cout << format_plan(config, r, p);
  const int64_t micro_batch_tokens = integer(o, "micro-batch-tokens", 8192);  // the trainer's default
  if (micro_batch_tokens < 1) throw Error(MLPT_INVALID_ARGUMENT, "--micro-batch-tokens must be positive");
  bool code_fits = true;
  std::cout << code_plan(config, r, micro_batch_tokens, code_fits);
  return p.trainer_fits && p.engine_fits && code_fits ? 0 : 3;
}

int refit_time_model(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2,
                         {"config", "trainer", "engine", "nodes", "trainer-nodes", "gpus-per-node", "changed-fraction",
                          "network-gbit", "nvlink-gbyte", "hbm-gbyte"});
  ModelConfig config = load_model_config(required(o, "config"));
  PlanRequest r = placement(o);
  r.gpu_bytes = 1e30;  // memory is plan's question, not this one's
  RefitLinks links;
  links.network_bytes_per_s = number(o, "network-gbit", 800) * 1e9 / 8;
  links.nvlink_bytes_per_s = number(o, "nvlink-gbyte", 900) * 1e9;
  links.hbm_bytes_per_s = number(o, "hbm-gbyte", 8000) * 1e9;
  if (!(links.network_bytes_per_s > 0 && links.nvlink_bytes_per_s > 0 && links.hbm_bytes_per_s > 0))
    throw Error(MLPT_INVALID_ARGUMENT, "link bandwidths must be positive");
  required(o, "changed-fraction");
  std::cout << format_refit(config, r, links, number(o, "changed-fraction", 0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool help = std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--help" || std::string(a) == "-h"; });
  if (argc < 2 || help) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  try {
    std::string cmd = argv[1];
    if (cmd == "init") return init(argc, argv);
    if (cmd == "score") return score(argc, argv);
    if (cmd == "plan") return plan(argc, argv);
    if (cmd == "refit-time") return refit_time_model(argc, argv);
    std::cerr << "mlpt model: unknown sub-command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlpt model " << argv[1] << ": " << e.what() << "\n";
#ifdef MLPT_REFERENCE_MODEL_MPI
    if (g_layout) g_layout->abort(1);
#endif
    return 1;
  }
}
