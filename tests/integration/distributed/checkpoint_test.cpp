// save_state / load_state of a model-parallel trainer across real processes (mpirun; TP2 x EP2,
// EP2, TP2, TP2 x DP2): the saved directory holds every tensor of the input (published-style: BF16, experts one tensor per expert
// in some layers and fused in others, mtp.* and vision tensors) whole, equal to a one-rank
// trainer's save after the same step (bit for bit under EP, within TP's float rounding), scored by
// `mlpt-model score`, the same bytes whatever piece of a tensor the save gathers at once; a load
// under the same layout resumes exactly, under another layout (or one rank) it reshards; a missing
// or corrupt file is named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "batch_file.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "trainer_runs.hpp"

using namespace dist_test;
using namespace mlpt::ref;
namespace fs = std::filesystem;

namespace {

// A published-style copy of checkpoint `from` in dir/published: BF16; routed experts one tensor
// per expert in even layers, fused in odd ones; and tensors the model does not use (mtp.*,
// vision), in several files with an index.
std::string published_copy(const TempDir& dir, const std::string& from) {
  const Weights<float> w = load_weights<float>(from);
  std::vector<EncodedTensor> owned;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    const bool even_layer = spec.name.find("layers.") != std::string::npos &&
                            std::stoi(spec.name.substr(spec.name.find("layers.") + 7)) % 2 == 0;
    std::vector<TensorPiece> pieces = even_layer ? expert_pieces(w.config, spec.name, 0, w.config.num_experts) : std::vector<TensorPiece>{};
    if (pieces.empty()) pieces.push_back({spec.name, spec.shape, 0});
    for (const TensorPiece& p : pieces) owned.push_back(encode_floats(p.name, p.shape, w.values[i].data() + p.offset, Dtype::bf16));
  }
  const int64_t H = w.config.hidden_size, I = w.config.moe_intermediate;
  std::vector<float> mtp(static_cast<size_t>(I * H));
  for (size_t i = 0; i < mtp.size(); ++i) mtp[i] = 0.01f * static_cast<float>(i % 13);
  owned.push_back(encode_floats("mtp.layers.0.mlp.experts.0.gate_proj.weight", {I, H}, mtp.data(), Dtype::bf16));
  const std::vector<int64_t> pos{0, 1, 2, -7};
  owned.push_back({"model.visual.pos_ids", {4}, Dtype::i64, std::vector<std::byte>(32)});
  std::memcpy(owned.back().bytes.data(), pos.data(), 32);
  std::vector<TensorToWrite> tensors;
  for (const EncodedTensor& t : owned) tensors.push_back({t.name, t.shape, nullptr, t.dtype, t.bytes.data()});
  const std::string out = dir / "published";
  write_checkpoint(out, tensors, 8192);
  json cfg = json::parse(mlpt_test::read_bytes(from + "/config.json"));
  cfg["text_config"]["dtype"] = "bfloat16";
  write_file_atomic(out + "/config.json", cfg.dump());
  return out;
}

// Compares two saved folders (the model directory, or its optimizer/ folder) tensor by tensor:
// the same names, dtypes and shapes; returns the largest difference of a weight's values (and
// counts tensors whose bytes differ). Non-weight tensors must be equal byte for byte.
struct FolderDiff {
  double worst = 0;
  size_t differing_tensors = 0, tensors = 0;
};
FolderDiff compare_folders(const std::string& a, const std::string& b) {
  const SafetensorsCheckpoint A(a), B(b);
  FolderDiff d;
  REQUIRE(A.names() == B.names());
  for (const std::string& name : A.names()) {
    INFO(a << " / " << b << ": " << name);
    const TensorEntry& ea = A.entry(name);
    REQUIRE(ea.dtype == B.entry(name).dtype);
    REQUIRE(ea.shape == B.entry(name).shape);
    ++d.tensors;
    const bool same = A.read_raw(name).bytes == B.read_raw(name).bytes;
    d.differing_tensors += !same;
    if (same) continue;
    REQUIRE(is_weight_dtype(ea.dtype));
    std::vector<float> x(static_cast<size_t>(ea.numel())), y(x.size());
    A.read<float>(name, ea.shape, x.data());
    B.read<float>(name, ea.shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) d.worst = std::max(d.worst, std::fabs(double(x[i]) - y[i]));
  }
  return d;
}

// `mlpt-model score` (one rank) of a checkpoint on two sequences: its output lines.
std::string score(const std::string& checkpoint) {
  int status = 0;
  const std::string out = mlpt_test::run_command("printf '1 2 3 4 5 6 7\\n9 8 7 30 2\\n' | " + std::string(MLPT_BUILD_DIR) +
                                                     "/bin/mlpt-model score --checkpoint " + checkpoint + " 2>&1",
                                                 &status);
  INFO(out);
  REQUIRE(status == 0);
  return out;
}

double worst_logprob_difference(const std::string& a, const std::string& b) {
  std::stringstream sa(a), sb(b);
  double worst = 0;
  for (std::string la, lb; std::getline(sa, la) && std::getline(sb, lb);) {
    const json ja = json::parse(la), jb = json::parse(lb);
    REQUIRE(ja["logprobs"].size() == jb["logprobs"].size());
    for (size_t i = 0; i < ja["logprobs"].size(); ++i)
      worst = std::max(worst, std::fabs(ja["logprobs"][i].get<double>() - jb["logprobs"][i].get<double>()));
  }
  return worst;
}

void require_group_ok(const TempDir& dir, const Launch& run, int ranks) {
  INFO(run.output);
  for (int r = 0; r < ranks; ++r) {
    const json report = rank_report(dir, r);
    INFO("rank " << r << ": " << report.dump(2));
    REQUIRE_FALSE(report.contains("error"));
  }
  REQUIRE(run.status == 0);
}

Launch run_group(const TempDir& dir, int ranks, const json& settings, const std::string& actions,
                 const std::string& trainer = "qwen35_cpu") {
  return mpirun(ranks, "env MLPT_TEST_TRAINER=" + trainer + " " + std::string(DIST_PEER_EXE) + " trainer " +
                           MLPT_PLUGIN_DIR + "/libmlpt_reference.so " + dir / "batch.json" + " '" + settings.dump() +
                           "' " + actions + " " + dir.str());
}

// One qwen35_cpu trainer in this process loads `state`, takes one step on the batch (version 2)
// and saves to `out`: the one-rank resume every layout's save is compared against.
void resume_one_rank_step(const TempDir& dir, const json& settings, const std::string& state,
                          const std::string& out) {
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  mlpt::components::Trainer single(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), settings);
  single.load_state(state);
  const BatchFile batch(dir / "batch.json");
  uint64_t version = 0;
  single.train_step(batch.abi, &version);
  CHECK(version == 2);
  single.save_state(out);
}

// Betas that keep the moments: a resumed step that lost them would differ.
const json kOptimizer = {{"lr", 0.01}, {"eps", 1e-3}, {"betas", {0.5, 0.75}}, {"grad_clip", 0}};

}  // namespace

// The stated tolerances: EP saves are bit for bit the one-rank save (EP computes each expert whole
// in the one-rank order); TP's fp32 master weights within 1e-6 of one rank's (measured ~4e-9),
// its BF16 model tensors within one BF16 step of them (a value near a rounding boundary may round
// the other way), its scores within 1e-4.
TEST_CASE("a TP=2 x EP=2 and an EP=2 trainer group save the one-rank trainer state, resume it exactly and reshard it") {
  TempDir dir("dist_ckpt");
  const std::string one1 = dir / "one1", one2 = dir / "one2";
  OneRankOptions options{[&](const std::string& ck) { return published_copy(dir, ck); }, kOptimizer, {one1, one2}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), options);
  const json settings = one.settings;
  auto layout = [&](int tp, int ep) {
    json s = settings;
    s["tensor_parallel"] = tp, s["expert_parallel"] = ep;
    return s;
  };
  const std::string s1 = dir / "tp2ep2.1", s2 = dir / "tp2ep2.2", e1 = dir / "ep2.1";

  // Save after one step (and after a second, uninterrupted).
  require_group_ok(dir, run_group(dir, 4, layout(2, 2), "step,save=" + s1 + ",step,save=" + s2), 4);
  // The same save gathered and written in the least pieces (one expert, one row of a matrix at a
  // time; whole tensors above): the same files, byte for byte.
  {
    json pieces = layout(2, 2);
    pieces["save_piece_bytes"] = 1;
    const std::string p1 = dir / "tp2ep2.pieces";
    require_group_ok(dir, run_group(dir, 4, pieces, "step,save=" + p1), 4);
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(s1))
      if (e.is_regular_file()) files.push_back(fs::relative(e.path(), s1).string());
    REQUIRE(files.size() > 6);
    for (const std::string& f : files) {
      INFO(f);
      CHECK(mlpt_test::read_bytes(p1 + "/" + f) == mlpt_test::read_bytes(s1 + "/" + f));
    }
  }
  require_group_ok(dir, run_group(dir, 2, layout(1, 2), "step,save=" + e1), 2);
  // The model directory: every tensor of the input (mtp.*, vision too) in its dtypes; an index.
  CHECK(fs::exists(s1 + "/model.safetensors.index.json"));
  CHECK(SafetensorsCheckpoint(s1).names() == SafetensorsCheckpoint(dir / "published").names());
  const json state = json::parse(mlpt_test::read_bytes(s1 + "/trainer_state.json"));
  CHECK(state["layout"] ==
        json({{"tensor_parallel", 2}, {"expert_parallel", 2}, {"expert_tensor_parallel", 1}, {"pipeline_parallel", 1},
              {"data_parallel", 1}}));
  CHECK(state["step"] == 1);

  const FolderDiff ep_model = compare_folders(e1, one1), ep_optimizer = compare_folders(e1 + "/optimizer", one1 + "/optimizer");
  CHECK(ep_model.differing_tensors == 0);  // bit for bit
  CHECK(ep_optimizer.differing_tensors == 0);
  const FolderDiff tp_model = compare_folders(s1, one1), tp_optimizer = compare_folders(s1 + "/optimizer", one1 + "/optimizer");
  CHECK(tp_optimizer.worst < 1e-6);
  CHECK(tp_model.worst <= 0.01);  // one BF16 step of the O(0.1..1) weights
  const std::string scored_one = score(one1), scored_ep = score(e1), scored_tp = score(s1);
  CHECK(scored_ep == scored_one);
  const double tp_score = worst_logprob_difference(scored_tp, scored_one);
  CHECK(tp_score < 1e-4);
  // TP=2 alone, and TP=2 x data parallel 2, where only the first replica writes (the second's
  // ranks hold the same shards and would write files of the same names).
  const std::string t1 = dir / "tp2.1", d1 = dir / "tp2dp2.1";
  require_group_ok(dir, run_group(dir, 2, layout(2, 1), "step,save=" + t1), 2);
  require_group_ok(dir, run_group(dir, 4, layout(2, 1), "step,save=" + d1), 4);
  CHECK(compare_folders(t1 + "/optimizer", one1 + "/optimizer").worst < 1e-6);
  CHECK(compare_folders(d1 + "/optimizer", one1 + "/optimizer").worst < 1e-6);
  CHECK(json::parse(mlpt_test::read_bytes(d1 + "/trainer_state.json"))["layout"]["data_parallel"] == 2);
  auto files = [](const std::string& folder) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  CHECK(files(d1) == files(t1));
  CHECK(files(d1 + "/optimizer") == files(t1 + "/optimizer"));
  for (const std::string& folder : {d1, d1 + "/optimizer"})
    for (const std::string& f : files(folder)) {
      if (f.size() < 12 || f.substr(f.size() - 12) != ".safetensors") continue;
      const std::string writer = SafetensorsFile(folder + "/" + f).metadata().at("mlpt_writer");
      INFO(folder << "/" << f << " written by " << writer);
      CHECK((writer == "trainer group rank 0" || writer == "trainer group rank 1"));
    }
  WARN("saved after one step: EP=2 " << ep_model.differing_tensors << " of " << ep_model.tensors << " model tensors differ from one rank's; TP=2 x EP=2 master weights within "
                                      << tp_optimizer.worst << ", BF16 model tensors within " << tp_model.worst << " ("
                                      << tp_model.differing_tensors << " of " << tp_model.tensors << " differ), scores within " << tp_score);

  // The same layout resumes exactly: load after step 1, step: the uninterrupted step 2's state.
  const std::string resumed = dir / "tp2ep2.resumed";
  require_group_ok(dir, run_group(dir, 4, layout(2, 2), "load=" + s1 + ",step,save=" + resumed), 4);
  CHECK(compare_folders(resumed, s2).differing_tensors == 0);
  CHECK(compare_folders(resumed + "/optimizer", s2 + "/optimizer").differing_tensors == 0);
  CHECK(json::parse(mlpt_test::read_bytes(resumed + "/trainer_state.json"))["step"] == 2);

  // Another layout reshards: TP=2 on two ranks, and one rank, resume the TP=2 x EP=2 state.
  const std::string tp2 = dir / "tp2.resumed";
  require_group_ok(dir, run_group(dir, 2, layout(2, 1), "load=" + s1 + ",step,save=" + tp2), 2);
  const FolderDiff tp2_diff = compare_folders(tp2 + "/optimizer", one2 + "/optimizer");
  CHECK(tp2_diff.worst < 1e-6);
  resume_one_rank_step(dir, settings, s1, dir / "one.resumed");
  const FolderDiff one_diff = compare_folders(dir / "one.resumed/optimizer", one2 + "/optimizer");
  CHECK(one_diff.worst < 1e-6);
  WARN("resumed under another layout: TP=2 within " << tp2_diff.worst << ", one rank within " << one_diff.worst
                                                    << " of the one-rank uninterrupted step 2");

  // A missing file of the state: every rank of the group refuses the load, naming the file.
  fs::copy(s1, dir / "broken", fs::copy_options::recursive);
  const json index = json::parse(mlpt_test::read_bytes(dir / "broken/optimizer/model.safetensors.index.json"));
  const std::string lost = index["weight_map"].begin().value();
  fs::remove(dir / ("broken/optimizer/" + lost));
  auto run = run_group(dir, 2, layout(2, 1), "load=" + (dir / "broken"));
  INFO(run.output);
  CHECK(run.status != 0);
  for (int r = 0; r < 2; ++r) {
    const json report = rank_report(dir, r);
    INFO(report.dump(2));
    CHECK_THAT(report.value("error", ""), Catch::Contains(lost) && Catch::Contains("trainer state"));
  }
  // A truncated file of a saved model directory, read as a checkpoint: named too.
  fs::copy(s1, dir / "truncated", fs::copy_options::recursive);
  const json model_index = json::parse(mlpt_test::read_bytes(dir / "truncated/model.safetensors.index.json"));
  const std::string cut = model_index["weight_map"].begin().value();
  const std::string bytes = mlpt_test::read_bytes(dir / ("truncated/" + cut));
  mlpt_test::write_bytes(dir / ("truncated/" + cut), bytes.substr(0, bytes.size() / 2));
  json truncated_settings = layout(2, 1);
  truncated_settings["checkpoint"] = dir / "truncated";
  run = run_group(dir, 2, truncated_settings, "step");
  CHECK(run.status != 0);
  for (int r = 0; r < 2; ++r) CHECK_THAT(rank_report(dir, r).value("error", ""), Catch::Contains(cut));
}

// Pipeline stages save the tensors of their own layers, each written whole by a rank of the stage
// that holds it: a PP=2 save is the one-rank save bit for bit (the stages compute as one rank),
// PP=2 x TP=2 within TP's rounding; either loads under another layout (one rank, PP=2 from a
// one-rank save) and steps as the uninterrupted one-rank trainer.
TEST_CASE("pipeline parallel: PP=2 and PP=2 x TP=2 trainer groups save the one-rank state, record the layout, and reshard on load") {
  TempDir dir("dist_ckpt_pp");
  const std::string one1 = dir / "one1", one2 = dir / "one2";
  OneRankOptions options{[&](const std::string& ck) { return published_copy(dir, ck); }, kOptimizer, {one1, one2}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), options);
  auto layout = [&](int tp, int pp) {
    json s = one.settings;
    s["tensor_parallel"] = tp, s["pipeline_parallel"] = pp;
    return s;
  };
  const std::string p1 = dir / "pp2.1", q1 = dir / "pp2tp2.1";
  require_group_ok(dir, run_group(dir, 2, layout(1, 2), "step,save=" + p1), 2);
  require_group_ok(dir, run_group(dir, 4, layout(2, 2), "step,save=" + q1), 4);
  CHECK(SafetensorsCheckpoint(p1).names() == SafetensorsCheckpoint(dir / "published").names());
  const json state = json::parse(mlpt_test::read_bytes(q1 + "/trainer_state.json"));
  CHECK(state["layout"]["pipeline_parallel"] == 2);
  CHECK(state["layout"]["tensor_parallel"] == 2);
  const FolderDiff pp_model = compare_folders(p1, one1), pp_optimizer = compare_folders(p1 + "/optimizer", one1 + "/optimizer");
  CHECK(pp_model.differing_tensors == 0);
  CHECK(pp_optimizer.differing_tensors == 0);
  const FolderDiff ptp_optimizer = compare_folders(q1 + "/optimizer", one1 + "/optimizer");
  CHECK(ptp_optimizer.worst < 1e-6);
  // Each stage's ranks wrote files (the second stage holds the LM head, the first the embedding).
  std::set<std::string> writers;
  for (const auto& e : fs::directory_iterator(q1 + "/optimizer"))
    if (e.path().extension() == ".safetensors") writers.insert(SafetensorsFile(e.path().string()).metadata().at("mlpt_writer"));
  CHECK(writers.count("trainer group rank 0") == 1);
  CHECK(writers.count("trainer group rank 2") == 1);

  // Another layout reshards: one rank resumes the PP=2 x TP=2 state, PP=2 the one-rank state.
  resume_one_rank_step(dir, one.settings, q1, dir / "one.resumed");
  const FolderDiff one_diff = compare_folders(dir / "one.resumed/optimizer", one2 + "/optimizer");
  CHECK(one_diff.worst < 1e-6);
  const std::string pp_resumed = dir / "pp2.resumed";
  require_group_ok(dir, run_group(dir, 2, layout(1, 2), "load=" + one1 + ",step,save=" + pp_resumed), 2);
  const FolderDiff pp_diff = compare_folders(pp_resumed + "/optimizer", one2 + "/optimizer");
  CHECK(pp_diff.differing_tensors == 0);
  WARN("PP=2 save: " << pp_optimizer.differing_tensors << " of " << pp_optimizer.tensors
                     << " optimizer tensors differ from one rank's; PP=2 x TP=2 master weights within " << ptp_optimizer.worst
                     << "; resumed on one rank within " << one_diff.worst << ", PP=2 from one rank's save: "
                     << pp_diff.differing_tensors << " tensors differ");
}

// The device trainer (qwen35_bf16: qwen35_cuda's code on the host) with pipeline stages saves as
// the CPU trainer does: the layout in trainer_state.json, each tensor written whole by a rank of
// its stage; its stages compute as its one rank (bf16 residual stream passed exactly), so the PP=2
// save is its one-rank save bit for bit, and either state resumes under the other layout to the
// one-rank second step bit for bit.
TEST_CASE("pipeline parallel: a qwen35_bf16 PP=2 group saves its one-rank state, records the layout, and reshards on load") {
  TempDir dir("dist_ckpt_pp_bf16");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), {nullptr, kOptimizer, {}});
  json staged = one.settings;
  staged["pipeline_parallel"] = 2;
  const std::string b1 = dir / "bf16.1", b2 = dir / "bf16.2", p1 = dir / "pp2.1", from_one = dir / "pp2.from_one",
                    from_pp = dir / "one.from_pp";
  require_group_ok(dir, run_group(dir, 1, one.settings, "step,save=" + b1 + ",step,save=" + b2, "qwen35_bf16"), 1);
  require_group_ok(dir, run_group(dir, 2, staged, "step,save=" + p1, "qwen35_bf16"), 2);
  const json state = json::parse(mlpt_test::read_bytes(p1 + "/trainer_state.json"));
  CHECK(state["layout"]["pipeline_parallel"] == 2);
  CHECK(json::parse(mlpt_test::read_bytes(b1 + "/trainer_state.json"))["layout"]["pipeline_parallel"] == 1);
  for (const auto& [mine, theirs] : {std::pair{p1, b1}, std::pair{p1 + "/optimizer", b1 + "/optimizer"}}) {
    INFO(mine << " against " << theirs);
    const FolderDiff d = compare_folders(mine, theirs);
    CHECK(d.tensors > 0);
    CHECK(d.differing_tensors == 0);
  }
  // Resharded both ways: the stages resume one rank's state, one rank the stages' state.
  require_group_ok(dir, run_group(dir, 2, staged, "load=" + b1 + ",step,save=" + from_one, "qwen35_bf16"), 2);
  require_group_ok(dir, run_group(dir, 1, one.settings, "load=" + p1 + ",step,save=" + from_pp, "qwen35_bf16"), 1);
  for (const std::string& resumed : {from_one, from_pp}) {
    INFO(resumed);
    CHECK(compare_folders(resumed + "/optimizer", b2 + "/optimizer").differing_tensors == 0);
    CHECK(compare_folders(resumed, b2).differing_tensors == 0);
  }
}

// The distributed optimizer (on by default): two data-parallel replicas each keep the Adam moments
// of half of every tensor, update that half and gather the other. Two steps in a row depend on the
// first step's moments, so a replica that updated with the wrong range's moments, or gathered the
// wrong range, would leave step 2 off by about a step's move (lr 0.01 here); the moments a save
// gathers equal one rank's (within the float order of the gradient sum, as plain data
// parallelism), and a state saved by one rank loads into the two replicas' halves.
TEST_CASE("the distributed optimizer: two data-parallel replicas, each with half the moments, step, save and load as one rank") {
  TempDir dir("dist_zero");
  const std::string one1 = dir / "one1", one2 = dir / "one2";
  OneRankOptions options{nullptr, kOptimizer, {one1, one2}};
  const OneRankStep one = one_rank_step(dir, mlpt_test::micro_config_json(), json::object(), options);
  const std::string z1 = dir / "dp2.1", z2 = dir / "dp2.2", resumed = dir / "dp2.resumed", plain = dir / "dp2.plain";
  require_group_ok(dir, run_group(dir, 2, one.settings, "step,save=" + z1 + ",step,save=" + z2), 2);
  for (const auto& [mine, theirs] : {std::pair{z1, one1}, std::pair{z2, one2}}) {
    INFO(mine);
    CHECK(json::parse(mlpt_test::read_bytes(mine + "/trainer_state.json"))["layout"]["data_parallel"] == 2);
    CHECK(compare_folders(mine + "/optimizer", theirs + "/optimizer").worst < 1e-6);
  }
  // One rank's step-1 state loaded into two replicas, each keeping its half: step 2 as one rank's.
  require_group_ok(dir, run_group(dir, 2, one.settings, "load=" + one1 + ",step,save=" + resumed), 2);
  const FolderDiff from_one = compare_folders(resumed + "/optimizer", one2 + "/optimizer");
  CHECK(from_one.worst < 1e-6);
  // Without it (every replica keeps every moment) the same states, bit for bit.
  json keep_all = one.settings;
  keep_all["distributed_optimizer"] = false;
  require_group_ok(dir, run_group(dir, 2, keep_all, "step,save=" + plain), 2);
  CHECK(compare_folders(plain + "/optimizer", z1 + "/optimizer").differing_tensors == 0);
  WARN("distributed optimizer over two replicas: a one-rank state resumed within " << from_one.worst
                                                                                    << " of one rank's step 2");

  // The device trainer's (qwen35_bf16: qwen35_cuda's code on the host) moments and master weights,
  // ranges gathered on the device: two replicas' two steps as its one rank's.
  const std::string b1 = dir / "bf16.1", b2 = dir / "bf16.2", bz1 = dir / "bf16dp2.1", bz2 = dir / "bf16dp2.2";
  require_group_ok(dir, run_group(dir, 1, one.settings, "step,save=" + b1 + ",step,save=" + b2, "qwen35_bf16"), 1);
  require_group_ok(dir, run_group(dir, 2, one.settings, "step,save=" + bz1 + ",step,save=" + bz2, "qwen35_bf16"), 2);
  for (const auto& [mine, theirs] : {std::pair{bz1, b1}, std::pair{bz2, b2}}) {
    INFO(mine);
    CHECK(compare_folders(mine + "/optimizer", theirs + "/optimizer").worst < 1e-6);
    CHECK(compare_folders(mine, theirs).worst <= 0.01);  // bf16 model tensors: one bf16 step at most
  }
}

// Saves under the distributed optimizer: each replica holds only its range of the moments, and a
// save gathers every piece's rows from the replicas' ranges as it writes them. The files are the
// unsharded save's bit for bit (distributed_optimizer false: every replica holds every moment):
// the states are the same bits (the step's two-term gradient sums round once whichever rank
// adds), and a save writes the same values whoever held them. So a sharded save resumed on
// another layout (one rank, TP=2, DP=2 x EP=2) steps exactly as the unsharded save resumed there,
// and within the TP tolerance of one rank's uninterrupted second step.
TEST_CASE(
    "the distributed optimizer: a DP=2 x TP=2 save of split moments resumes on one rank, TP=2 and DP=2 x "
    "EP=2 as the unsharded save does, bit for bit") {
  TempDir dir("dist_zero_resume");
  const std::string one1 = dir / "one1", one2 = dir / "one2";
  OneRankOptions options{nullptr, kOptimizer, {one1, one2}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), options);
  auto layout = [&](int tp, int ep, bool distributed) {
    json s = one.settings;
    s["tensor_parallel"] = tp, s["expert_parallel"] = ep, s["distributed_optimizer"] = distributed;
    return s;
  };
  const std::string split = dir / "dp2tp2.split", whole = dir / "dp2tp2.whole";
  require_group_ok(dir, run_group(dir, 4, layout(2, 1, true), "step,save=" + split), 4);
  require_group_ok(dir, run_group(dir, 4, layout(2, 1, false), "step,save=" + whole), 4);
  for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
    INFO("folder " << folder);
    const FolderDiff saved = compare_folders(split + folder, whole + folder);
    CHECK(saved.tensors > 0);
    CHECK(saved.differing_tensors == 0);
  }
  CHECK(json::parse(mlpt_test::read_bytes(split + "/trainer_state.json"))["layout"]["data_parallel"] == 2);
  struct Target {
    const char *name, *tag;  // tag: the saves' folder names
    int ranks, tp, ep;
  };
  double worst = 0;
  for (const Target& t : {Target{"one rank", "one", 1, 1, 1}, Target{"TP=2", "tp2", 2, 2, 1},
                          Target{"DP=2 x EP=2", "dp2ep2", 4, 1, 2}}) {
    INFO("resumed on " << t.name);
    const std::string from_split = dir / (std::string(t.tag) + ".from_split"),
                      from_whole = dir / (std::string(t.tag) + ".from_whole");
    require_group_ok(
        dir, run_group(dir, t.ranks, layout(t.tp, t.ep, true), "load=" + split + ",step,save=" + from_split),
        t.ranks);
    require_group_ok(
        dir, run_group(dir, t.ranks, layout(t.tp, t.ep, true), "load=" + whole + ",step,save=" + from_whole),
        t.ranks);
    for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
      INFO("folder " << folder);
      CHECK(compare_folders(from_split + folder, from_whole + folder).differing_tensors == 0);
    }
    const FolderDiff against_one = compare_folders(from_split + "/optimizer", one2 + "/optimizer");
    CHECK(against_one.worst < 1e-6);
    worst = std::max(worst, against_one.worst);
  }
  WARN("a DP=2 x TP=2 save of split moments resumed on one rank, TP=2 and DP=2 x EP=2: step 2 within "
       << worst << " of one rank's");
}

// MoE parallel folding: the dense tensors' moments are split over their dp · ep replicas (the
// expert-parallel ranks of the writing replica among them), the experts' over dp. A folded group
// that loads the one-rank state and saves it again writes it bit for bit (no arithmetic between);
// a folded step's save is the one-rank step's within the data-parallel bound (1e-6: the shares'
// gradients summed in another order), and it resumes on one rank within that bound of one rank's
// uninterrupted second step.
TEST_CASE(
    "MoE parallel folding: folded TP=2 x EP=2 groups (two and four shares) save split moments as one rank "
    "does, and the save resumes on one rank") {
  TempDir dir("dist_ckpt_folded");
  const std::string one1 = dir / "one1", one2 = dir / "one2";
  OneRankOptions options{nullptr, kOptimizer, {one1, one2}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), options);
  json folded = one.settings;
  folded["tensor_parallel"] = 2, folded["expert_parallel"] = 2, folded["moe_parallel_folding"] = true;
  double worst = 0;
  for (int ranks : {4, 8}) {
    INFO(ranks << " ranks");
    const std::string again = dir / ("again" + std::to_string(ranks)),
                      stepped = dir / ("step" + std::to_string(ranks));
    require_group_ok(dir, run_group(dir, ranks, folded, "load=" + one1 + ",save=" + again), ranks);
    require_group_ok(dir, run_group(dir, ranks, folded, "step,save=" + stepped), ranks);
    for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
      INFO("folder " << folder);
      const FolderDiff same = compare_folders(again + folder, one1 + folder);
      CHECK(same.tensors > 0);
      CHECK(same.differing_tensors == 0);
      const FolderDiff step = compare_folders(stepped + folder, one1 + folder);
      CHECK(step.tensors > 0);
      CHECK(step.worst < 1e-6);
      worst = std::max(worst, step.worst);
    }
    CHECK(json::parse(mlpt_test::read_bytes(stepped + "/trainer_state.json"))["layout"]["data_parallel"] ==
          ranks / 2);
    // The folded save resumed on one rank: its second step as one rank's uninterrupted one.
    json alone = one.settings;
    const std::string resumed = dir / ("resumed" + std::to_string(ranks));
    require_group_ok(dir, run_group(dir, 1, alone, "load=" + stepped + ",step,save=" + resumed), 1);
    const FolderDiff second = compare_folders(resumed + "/optimizer", one2 + "/optimizer");
    CHECK(second.worst < 1e-6);
    worst = std::max(worst, second.worst);
  }
  WARN("folded TP=2 x EP=2 saves: within " << worst << " of one rank's (steps 1 and 2)");
}

// Vocabulary parallelism: a TP=2 group holds the embedding and LM head split by token ids (the
// micro model's 37 ids: 19 and 18 rows); loading the one-rank state and saving it again, with no
// step between, writes the one-rank save bit for bit (model directory and optimizer), as does TP=2
// x EP=2.
TEST_CASE("vocab parallel: TP=2 and TP=2 x EP=2 groups load the one-rank state and save it again bit for bit") {
  TempDir dir("dist_ckpt_vocab");
  const std::string one1 = dir / "one1";
  OneRankOptions options{[&](const std::string& ck) { return published_copy(dir, ck); }, kOptimizer, {one1}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), options);
  for (const auto& [ranks, ep] : {std::pair{2, 1}, std::pair{4, 2}}) {
    INFO("tp 2 ep " << ep);
    json settings = one.settings;
    settings["tensor_parallel"] = 2, settings["expert_parallel"] = ep;
    const std::string again = dir / ("tp2ep" + std::to_string(ep));
    require_group_ok(dir, run_group(dir, ranks, settings, "load=" + one1 + ",save=" + again), ranks);
    for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
      INFO("folder " << folder);
      const FolderDiff diff = compare_folders(again + folder, one1 + folder);
      CHECK(diff.tensors > 0);
      CHECK(diff.differing_tensors == 0);
    }
  }
}

// The device trainer (qwen35_bf16: qwen35_cuda's code on the host) splits the vocabulary as the
// CPU trainer does (device_model/vocab_head.hpp): a TP=2 group, each rank holding 19 or 18 of the
// micro model's 37 embedding and LM-head rows, loads a one-rank device trainer's state after a
// step and saves it again bit for bit (model directory and optimizer).
TEST_CASE("vocab parallel: a qwen35_bf16 TP=2 group loads its one-rank state and saves it again bit for bit") {
  TempDir dir("dist_ckpt_vocab_bf16");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), {nullptr, kOptimizer, {}});
  const std::string b1 = dir / "bf16.1", again = dir / "tp2.again";
  require_group_ok(dir, run_group(dir, 1, one.settings, "step,save=" + b1, "qwen35_bf16"), 1);
  json settings = one.settings;
  settings["tensor_parallel"] = 2;
  require_group_ok(dir, run_group(dir, 2, settings, "load=" + b1 + ",save=" + again, "qwen35_bf16"), 2);
  for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
    INFO("folder " << folder);
    const FolderDiff diff = compare_folders(again + folder, b1 + folder);
    CHECK(diff.tensors > 0);
    CHECK(diff.differing_tensors == 0);
  }
}

// The device trainer's distributed optimizer splits the fp32 masters as it splits the moments: a
// save gathers both from the replicas' ranges, a load keeps each replica's range of both. So two
// replicas' save is bit for bit the save of replicas keeping everything (the update is elementwise
// on the same gradient sum: distributed_test.cpp derives it), and a one-rank state loaded into the
// two replicas' halves (or a folded TP=2 x EP=2 group's) and saved again is that state, bit for bit.
TEST_CASE("the distributed optimizer: qwen35_bf16 replicas save their split masters as whole ones, and load a state into halves") {
  TempDir dir("dist_ckpt_zero_bf16");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), json::object(), {nullptr, kOptimizer, {}});
  const std::string b1 = dir / "bf16.1", split = dir / "dp2.split", whole = dir / "dp2.whole", again = dir / "dp2.again";
  json settings = one.settings;
  settings["distributed_optimizer"] = true;
  require_group_ok(dir, run_group(dir, 2, settings, "step,save=" + split, "qwen35_bf16"), 2);
  require_group_ok(dir, run_group(dir, 1, one.settings, "step,save=" + b1, "qwen35_bf16"), 1);
  require_group_ok(dir, run_group(dir, 2, settings, "load=" + b1 + ",save=" + again, "qwen35_bf16"), 2);
  // Folded TP=2 x EP=2: the dense tensors' moments split over the two EP ranks, lent as written.
  json folded = one.settings;
  folded["tensor_parallel"] = 2, folded["expert_parallel"] = 2, folded["moe_parallel_folding"] = true;
  const std::string folded_again = dir / "folded.again";
  require_group_ok(dir, run_group(dir, 4, folded, "load=" + b1 + ",save=" + folded_again, "qwen35_bf16"), 4);
  settings["distributed_optimizer"] = false;
  require_group_ok(dir, run_group(dir, 2, settings, "step,save=" + whole, "qwen35_bf16"), 2);
  for (const auto& [mine, theirs] : {std::pair{split, whole}, std::pair{again, b1}, std::pair{folded_again, b1}})
    for (const std::string& folder : {std::string(), std::string("/optimizer")}) {
      INFO(mine << folder << " against " << theirs << folder);
      const FolderDiff d = compare_folders(mine + folder, theirs + folder);
      CHECK(d.tensors > 0);
      CHECK(d.differing_tensors == 0);
    }
}
