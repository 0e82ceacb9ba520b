#include "model/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/layout.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

using sdk::Error;

namespace {

constexpr double kBf16 = 2, kFp32 = 4;
constexpr double kAdamBytes = 3 * kFp32;      // fp32 master weight + exp_avg + exp_avg_sq
constexpr double kEngineUtilization = 0.9;    // vLLM's gpu_memory_utilization default
constexpr int64_t kGdnChunk = 64;             // chunked GDN keeps one state per chunk for backward

void require_divides(int64_t part, int64_t whole, const std::string& what) {
  if (part <= 0 || whole % part != 0)
    throw Error(MLPT_INVALID_ARGUMENT, what + ": " + std::to_string(whole) + " is not divisible by " + std::to_string(part));
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(1ull << 20));
  return buf;
}

std::string billions(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) / 1e9);
  return buf;
}

}  // namespace

ParallelLayout parse_parallel_layout(const std::string& text) {
  ParallelLayout l;
  bool seen[3] = {false, false, false};
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    size_t digits = part.find_first_of("0123456789");
    std::string key = part.substr(0, digits);
    int k = key == "tp" ? 0 : key == "pp" ? 1 : key == "ep" ? 2 : -1;
    int64_t v = 0;
    bool number = digits != std::string::npos && part.find_first_not_of("0123456789", digits) == std::string::npos &&
                  part.size() - digits <= 6;
    if (number) v = std::stoll(part.substr(digits));
    if (k < 0 || !number || v <= 0 || seen[k])
      throw Error(MLPT_INVALID_ARGUMENT, "parallel layout '" + text + "': '" + part +
                                             "' is not one of tpN, ppN, epN (N positive, each at most once)");
    seen[k] = true;
    (k == 0 ? l.tp : k == 1 ? l.pp : l.ep) = v;
  }
  return l;
}

std::string to_string(const ParallelLayout& l) {
  return "tp" + std::to_string(l.tp) + ",pp" + std::to_string(l.pp) + ",ep" + std::to_string(l.ep);
}

int64_t ParameterCount::active_per_token() const {
  return total - routed_experts + (num_experts ? routed_experts / num_experts * experts_per_token : 0);
}

ParameterCount count_parameters(const ModelConfig& c) {
  ParameterCount p;
  ModelLayout layout = make_layout(c);
  for (const TensorSpec& t : layout.tensors) {
    p.total += t.numel();
    if (t.name.find(".mlp.experts.") != std::string::npos) p.routed_experts += t.numel();
  }
  p.vocabulary = layout.tensors[layout.embed].numel() + layout.tensors[layout.lm_head].numel();
  p.num_experts = c.num_experts;
  p.experts_per_token = c.experts_per_token;
  return p;
}

MemoryPlan plan_memory(const ModelConfig& c, const PlanRequest& r) {
  MemoryPlan plan;
  plan.params = count_parameters(c);
  const ParameterCount& n = plan.params;
  const double H = static_cast<double>(c.hidden_size), T = static_cast<double>(r.context);
  const double experts = static_cast<double>(n.routed_experts), vocab = static_cast<double>(n.vocabulary);
  const double layers_dense = static_cast<double>(n.total) - experts - vocab;
  const std::string tl = "trainer " + to_string(r.trainer), el = "engine " + to_string(r.engine);
  if (r.nodes <= 0 || r.gpus_per_node <= 0) throw Error(MLPT_INVALID_ARGUMENT, "--nodes and --gpus-per-node must be positive");
  const int64_t trainer_nodes = r.trainer_nodes > 0 ? r.trainer_nodes : r.nodes / 4;
  if (trainer_nodes <= 0 || trainer_nodes >= r.nodes)
    throw Error(MLPT_INVALID_ARGUMENT, "training takes " + std::to_string(trainer_nodes) + " of " + std::to_string(r.nodes) +
                                           " nodes: it needs at least one and must leave some to generation");

  // Trainer: Megatron TP x PP for the dense part (DP replicas over the rest), experts split EP-way
  // inside each pipeline stage (expert TP 1), distributed optimizer sharded over the data-parallel
  // copies of each parameter, bf16 weights with fp32 main gradients.
  const ParallelLayout& tr = r.trainer;
  TrainerGpu& t = plan.trainer;
  t.world = trainer_nodes * r.gpus_per_node;
  require_divides(tr.tp * tr.pp, t.world, tl + " (tp x pp) of " + std::to_string(t.world) + " training GPUs");
  require_divides(tr.ep * tr.pp, t.world, tl + " (ep x pp) of " + std::to_string(t.world) + " training GPUs");
  require_divides(tr.pp, c.num_layers, tl + " pp of num_hidden_layers");
  require_divides(tr.ep, c.num_experts, tl + " ep of num_experts");
  require_divides(tr.tp, c.num_heads, tl + " tp of num_attention_heads");
  require_divides(tr.tp, c.gdn_key_heads, tl + " tp of linear_num_key_heads");
  t.dp = t.world / (tr.tp * tr.pp);
  t.expert_dp = t.world / (tr.ep * tr.pp);
  const double pp = static_cast<double>(tr.pp), ttp = static_cast<double>(tr.tp);
  // The busiest stage: its layers plus the embedding (first) or LM head (last), vocabulary split TP-way.
  const double dense_params = layers_dense / (ttp * pp) + vocab / 2 / ttp;
  const double expert_params = experts / (static_cast<double>(tr.ep) * pp);
  t.weights = (dense_params + expert_params) * kBf16;
  t.gradients = (dense_params + expert_params) * kFp32;
  t.optimizer = dense_params * kAdamBytes / static_cast<double>(t.dp) + expert_params * kAdamBytes / static_cast<double>(t.expert_dp);
  // Activations, one sequence of `context` tokens per micro-batch, sequence parallel, 1F1B: the
  // first stage holds pp micro-batches of its L/pp layers' inputs (full recompute keeps only those),
  // plus the recomputed working set of the largest layer (its intermediates and their gradients).
  const double q_dim = static_cast<double>(c.num_heads * c.head_dim);
  const double kv_dim = static_cast<double>(std::max<int64_t>(1, c.num_kv_heads / tr.tp) * c.head_dim);
  const double conv = static_cast<double>(c.conv_dim()), vdim = static_cast<double>(c.value_dim());
  const double hv = static_cast<double>(c.gdn_value_heads);
  const double checkpoints = static_cast<double>(c.num_layers) * T / ttp * H * kBf16;
  const double gdn = T * (H + (2 * conv + 3 * vdim + 2 * hv) / ttp) * kBf16 +
                     std::ceil(T / kGdnChunk) * (hv / ttp) * static_cast<double>(c.gdn_key_dim * c.gdn_value_dim) * kFp32;
  const double attn = T * (H + (4 * q_dim) / ttp + 2 * kv_dim) * kBf16;
  const double I = static_cast<double>(c.moe_intermediate), Is = static_cast<double>(c.shared_intermediate);
  const double moe = T / ttp * (static_cast<double>(c.experts_per_token) * (3 * I + H) + 3 * Is + H) * kBf16 +
                     T / ttp * static_cast<double>(c.num_experts) * kFp32;
  t.activations = checkpoints + 2 * std::max({gdn, attn, moe});
  plan.trainer_fits = t.total() <= r.gpu_bytes;

  // Engine: vLLM replicas, dense weights TP-way, experts EP-way over the replica's GPUs (EP = TP x DP
  // in vLLM, so a replica spans max(tp, ep) GPUs), KV heads replicated when TP exceeds them.
  const ParallelLayout& en = r.engine;
  EngineGpu& e = plan.engine;
  if (en.pp != 1) throw Error(MLPT_INVALID_ARGUMENT, el + ": the engine plan has no pipeline stages (pp must be 1)");
  require_divides(en.tp, c.num_heads, el + " tp of num_attention_heads");
  require_divides(en.tp, c.gdn_key_heads, el + " tp of linear_num_key_heads");
  require_divides(en.ep, c.num_experts, el + " ep of num_experts");
  if (en.ep > en.tp) require_divides(en.tp, en.ep, el + " tp of ep (experts span whole TP groups)");
  e.gpus_per_replica = std::max(en.tp, en.ep);
  e.replicas = (r.nodes - trainer_nodes) * r.gpus_per_node / e.gpus_per_replica;
  const double etp = static_cast<double>(en.tp);
  e.weights = ((layers_dense + vocab) / etp + experts / static_cast<double>(en.ep)) * kBf16;
  const double kv_heads = static_cast<double>(std::max<int64_t>(1, c.num_kv_heads / en.tp));
  e.kv_per_token = static_cast<double>(c.num_attention_layers()) * 2 * kv_heads * static_cast<double>(c.head_dim) * kBf16;
  e.kv_per_session = e.kv_per_token * T;
  const double gdn_layers = static_cast<double>(c.num_layers - c.num_attention_layers());
  e.gdn_state_per_session = gdn_layers * ((hv / etp) * static_cast<double>(c.gdn_key_dim * c.gdn_value_dim) * kFp32 +
                                          conv / etp * static_cast<double>(c.conv_kernel - 1) * kBf16);
  e.usable = r.gpu_bytes * kEngineUtilization;
  const double per_session = e.kv_per_session + e.gdn_state_per_session;
  e.sessions_per_replica = e.usable > e.weights ? static_cast<int64_t>((e.usable - e.weights) / per_session) : 0;
  plan.engine_fits = e.sessions_per_replica >= 1;
  return plan;
}

std::string format_plan(const ModelConfig& c, const PlanRequest& r, const MemoryPlan& p) {
  std::ostringstream o;
  const auto& n = p.params;
  o << "model: " << billions(n.total) << " parameters (text model; no MTP, no vision), " << billions(n.active_per_token())
    << " active per token; routed experts " << billions(n.routed_experts) << ", embedding + LM head "
    << billions(n.vocabulary) << "; " << c.num_layers << " layers (" << c.num_attention_layers() << " attention, "
    << c.num_layers - c.num_attention_layers() << " GDN), " << c.num_experts << " experts, top-" << c.experts_per_token << "\n";
  o << "GPU memory: " << gib(r.gpu_bytes) << "; context " << r.context << " tokens\n";
  const auto& t = p.trainer;
  o << "trainer " << to_string(r.trainer) << " on " << t.world << " GPUs (dp " << t.dp << ", expert dp " << t.expert_dp
    << "), busiest GPU:\n"
    << "  weights (bf16)            " << gib(t.weights) << "\n"
    << "  gradients (fp32 main)     " << gib(t.gradients) << "\n"
    << "  optimizer (fp32 master + Adam m, v; sharded over dp) " << gib(t.optimizer) << "\n"
    << "  activations (1 x " << r.context << " tokens, full recompute, 1F1B, sequence parallel: a Megatron-style "
       "model, not the reference code, whose step is below) "
    << gib(t.activations) << "\n"
    << "  total                     " << gib(t.total()) << " -> " << (p.trainer_fits ? "fits" : "DOES NOT FIT") << "\n";
  const auto& e = p.engine;
  o << "engine " << to_string(r.engine) << ": " << e.replicas << " replicas of " << e.gpus_per_replica << " GPUs, per GPU:\n"
    << "  weights (bf16)            " << gib(e.weights) << "\n"
    << "  KV per session (" << r.context << " tokens, " << mib(e.kv_per_token * 1024) << " per 1024 tokens) "
    << gib(e.kv_per_session) << "\n"
    << "  GDN state per session (fp32 state + conv window) " << mib(e.gdn_state_per_session) << "\n"
    << "  full-context sessions per replica beside the weights (90% of memory usable): " << e.sessions_per_replica
    << " -> " << (p.engine_fits ? "fits" : "DOES NOT FIT") << "\n";
  o << (p.trainer_fits && p.engine_fits ? "plan fits" : "plan does not fit") << "\n";
  return o.str();
}

double parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "B" ? 1
                 : unit == "KiB"             ? 1024.0
                 : unit == "MiB"             ? 1024.0 * 1024
                 : unit == "GiB"             ? 1024.0 * 1024 * 1024
                 : unit == "TiB"             ? 1024.0 * 1024 * 1024 * 1024
                 : unit == "KB"              ? 1e3
                 : unit == "MB"              ? 1e6
                 : unit == "GB"              ? 1e9
                 : unit == "TB"              ? 1e12
                                             : -1;
  if (used == 0 || scale < 0 || !(v > 0))
    throw Error(MLPT_INVALID_ARGUMENT, "'" + text + "' is not a memory size (e.g. 288GiB, 80GB)");
  return v * scale;
}

}  // namespace mlpt::ref
