#include "trainer/trainer_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/safetensors.hpp"

namespace mlpt::ref {

namespace fs = std::filesystem;
using sdk::Error;

namespace {

constexpr const char* kStateFormat = "mlpt-reference-trainer-state";
constexpr int kFormatVersion = 2;  // 1 kept whole tensors in one optimizer.safetensors
// Files of a saved model directory, as the published checkpoints are split (HF's default 5 GB).
constexpr size_t kFileBytes = size_t{5} << 30;
// The optimizer folder's names: the fp32 master weights and the two AdamW moments.
constexpr const char* kPrefixes[3] = {"master.", "exp_avg.", "exp_avg_sq."};
constexpr const char* kOptimizerFolder = "optimizer";

// The tensors one rank writes into one folder: declared first, in the order they are written
// (which makes the files: model-r<rank>-<k>.safetensors, the next one begun once a file holds
// kFileBytes; the index merged by group rank 0 lists them), then each tensor's bytes appended as
// they are gathered and encoded, piece by piece.
class RankFiles {
 public:
  RankFiles(fs::path dir, int rank, int group_rank)
      : dir_(std::move(dir)), rank_(rank), writer_("trainer group rank " + std::to_string(group_rank)) {}

  void declare(TensorDeclaration t) {
    if (files_.empty() || bytes_ >= kFileBytes) files_.emplace_back(), bytes_ = 0;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    bytes_ += static_cast<size_t>(n) * dtype_bytes(t.dtype);
    file_of_[t.name] = files_.size() - 1;
    files_.back().push_back(std::move(t));
  }
  // Creates the declared files (their headers); appends may follow.
  void open() {
    for (size_t k = 0; k < files_.size(); ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-r%05d-%05zu.safetensors", rank_, k + 1);
      writers_.push_back(std::make_unique<SafetensorsWriter>((dir_ / name).string(), files_[k],
                                                             std::map<std::string, std::string>{{"format", "pt"}, {"mlpt_writer", writer_}}));
    }
  }
  void append(const std::string& name, const void* bytes, size_t n) {
    writers_.at(file_of_.at(name))->append(name, bytes, n);
    written_ += n;
  }
  void commit() {
    for (auto& w : writers_) w->commit();
  }
  size_t written() const { return written_; }

 private:
  fs::path dir_;
  int rank_;
  std::string writer_;
  std::vector<std::vector<TensorDeclaration>> files_;
  std::map<std::string, size_t> file_of_;
  std::vector<std::unique_ptr<SafetensorsWriter>> writers_;
  size_t bytes_ = 0, written_ = 0;
};

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// What every rank of the model-parallel group holds, computed alike on each (no exchange needed).
struct GroupPlacements {
  int tp = 1, ep = 1, etp = 1, pp = 1;
  std::vector<std::vector<ShardPlacement>> of_rank;  // [model-parallel rank][tensor]
  int size() const { return tp * ep * pp; }
  int stage_size() const { return tp * ep; }
};

GroupPlacements group_placements(const ModelConfig& full, const ModelShard& mine) {
  GroupPlacements g{mine.tp, mine.ep, mine.etp, mine.pp, {}};
  for (int r = 0; r < g.size(); ++r) {
    ModelShard s = ModelShard::of_model_rank(mine.tp, mine.ep, mine.pp, r, mine.etp);
    s.vocab_parallel = mine.vocab_parallel;
    g.of_rank.push_back(shard_placements(full, shard_layout(full, s), s));
  }
  return g;
}

// One box some rank sends for a tensor: the box (of that rank's placement), and the part of the
// tensor it belongs to (a block of routed experts, or the whole tensor) and that part's writer.
struct Contribution {
  int rank;
  const ShardBox* box;
  int64_t part;
  int writer;
};

// How one tensor is written: in `parts` parts along dim 0 (expert blocks, or 1: whole), part p by
// rank writer[p]; and which ranks' boxes make it up (replicas' copies taken once, from the
// lowest rank holding them).
struct TensorWrite {
  int64_t parts = 1;
  std::vector<int> writer;
  std::vector<Contribution> contributions;
};

TensorWrite plan_tensor(const GroupPlacements& g, size_t i, bool expert_blocks) {
  TensorWrite w;
  const int size = g.size(), stage = g.stage_size();
  // The pipeline stage holding the tensor: its first model rank.
  int base = 0;
  while (base + stage < size && g.of_rank[static_cast<size_t>(base)][i].boxes.empty()) base += stage;
  // A block of experts is held by one rank (expert tensor parallel 1) or by the tp ranks of an ep rank.
  w.parts = expert_blocks ? (g.etp == 1 ? stage : g.ep) : 1;
  // Writers spread over the stage's ranks: a block of experts stays within its expert-parallel ranks.
  for (int64_t p = 0; p < w.parts; ++p)
    w.writer.push_back(base + (!expert_blocks ? static_cast<int>(i % stage)
                               : g.etp == 1   ? static_cast<int>(p)
                                              : static_cast<int>(p) * g.tp + static_cast<int>(i % g.tp)));
  const int64_t rows = g.of_rank[0][i].global_shape[0], per_part = rows / w.parts;
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
  for (int r = 0; r < size; ++r)
    for (const ShardBox& box : g.of_rank[r][i].boxes) {
      if (!seen.insert({box.global_offset, box.extent}).second) continue;  // a replica's copy
      const int64_t part = box.global_offset[0] / per_part;
      w.contributions.push_back({r, &box, part, w.writer[static_cast<size_t>(part)]});
    }
  return w;
}

// Each contribution's box of tensor i cut to rows [begin, begin + rows) of its part; a box that
// holds none of them is left out.
struct Cut {
  const Contribution* c;
  ShardBox box;
};
std::vector<Cut> cut_rows(const GroupPlacements& g, const TensorWrite& plan, size_t i, int64_t begin,
                          int64_t rows) {
  const int64_t per_part = g.of_rank[0][i].global_shape[0] / plan.parts;
  std::vector<Cut> cuts;
  for (const Contribution& c : plan.contributions) {
    const int64_t first = c.part * per_part + begin, box_first = c.box->global_offset[0];
    const int64_t from = std::max(first, box_first), to = std::min(first + rows, box_first + c.box->extent[0]);
    if (from >= to) continue;
    ShardBox box = *c.box;
    box.local_offset[0] += from - box_first;
    box.global_offset[0] = from;
    box.extent[0] = to - from;
    cuts.push_back({&c, std::move(box)});
  }
  return cuts;
}

// The rows of rank me's local tensor that `cuts` read: [first, end), empty when it sends none.
std::pair<int64_t, int64_t> local_rows_read(const std::vector<Cut>& cuts, int me) {
  int64_t first = 0, end = 0;
  for (const Cut& cut : cuts) {
    if (cut.c->rank != me) continue;
    const int64_t from = cut.box.local_offset[0], to = from + cut.box.extent[0];
    if (first == end) first = from, end = to;
    first = std::min(first, from), end = std::max(end, to);
  }
  return {first, end};
}

// Rows [begin, begin + rows) of every part of tensor i (counted from the part's first row), of one
// quantity (weights or a moment), gathered to the parts' writers: on this rank, those rows of the
// parts it writes (empty for the others). `local` holds rows [local_first_row, ...) of this rank's
// tensor, `local_shape` their shape. Collective over the model-parallel group. `held`: the bytes
// of values this rank held for it at once.
std::vector<std::vector<float>> gather_rows(const GroupPlacements& g, const TensorWrite& plan, size_t i,
                                            int me, const float* local,
                                            const std::vector<int64_t>& local_shape, int64_t local_first_row,
                                            Communicator* group, int64_t begin, int64_t rows, size_t* held) {
  const int size = g.size();
  const std::vector<int64_t>& global = g.of_rank[0][i].global_shape;
  const int64_t per_part = global[0] / plan.parts;
  const std::vector<Cut> cuts = cut_rows(g, plan, i, begin, rows);
  std::vector<size_t> send_counts(static_cast<size_t>(size), 0), recv_counts(static_cast<size_t>(size), 0);
  for (const Cut& cut : cuts) {
    const size_t n = static_cast<size_t>(numel(cut.box.extent));
    if (cut.c->rank == me) send_counts[static_cast<size_t>(cut.c->writer)] += n;
    if (cut.c->writer == me) recv_counts[static_cast<size_t>(cut.c->rank)] += n;
  }
  // The send buffer in destination order, each destination's boxes in plan order.
  std::vector<float> send, received;
  for (int d = 0; d < size; ++d)
    for (const Cut& cut : cuts) {
      if (cut.c->rank != me || cut.c->writer != d) continue;
      const size_t at = send.size();
      send.resize(at + static_cast<size_t>(numel(cut.box.extent)));
      ShardBox from = cut.box;
      from.local_offset[0] -= local_first_row;
      copy_local_box(local, local_shape, from, send.data() + at);
    }
  const size_t sent = send.size();
  const bool exchanged = group && size > 1;  // else the send buffer becomes the received one
  if (exchanged) {
    size_t total = 0;
    for (size_t n : recv_counts) total += n;
    received.resize(total);
    group->all_to_all_v(send.data(), send_counts.data(), received.data(), recv_counts.data());
  } else {
    received = std::move(send);
  }
  std::vector<std::vector<float>> parts(static_cast<size_t>(plan.parts));
  std::vector<int64_t> chunk_shape = global;
  chunk_shape[0] = rows;
  for (int64_t p = 0; p < plan.parts; ++p)
    if (plan.writer[static_cast<size_t>(p)] == me) parts[static_cast<size_t>(p)].assign(static_cast<size_t>(numel(chunk_shape)), 0.0f);
  // Received in source-rank order, each source's boxes in plan order: the order they were sent.
  size_t at = 0, kept = 0;
  for (int s = 0; s < size; ++s)
    for (const Cut& cut : cuts) {
      if (cut.c->rank != s || cut.c->writer != me) continue;
      ShardBox place{cut.box.global_offset, cut.box.extent, cut.box.global_offset};
      place.local_offset[0] -= cut.c->part * per_part + begin;
      place_local_box(received.data() + at, chunk_shape, place, parts[static_cast<size_t>(cut.c->part)].data());
      at += static_cast<size_t>(numel(cut.box.extent));
    }
  for (const auto& part : parts) kept += part.size();
  *held = ((exchanged ? sent : 0) + received.size() + kept) * sizeof(float);
  return parts;
}

// The rows of dim 0 gathered, encoded and written at once: about `piece_bytes` of fp32 values,
// in whole experts of a routed-expert tensor ([E, ., .]; FP8 scales are per expert), whole blocks
// of rows of a matrix stored in FP8 (its scales then cut alike), any rows of another matrix, a
// vector whole.
int64_t rows_per_piece(const std::vector<int64_t>& shape, int64_t fp8_block_rows, size_t piece_bytes) {
  const int64_t rows = shape[0];
  if (shape.size() < 2 || rows == 0) return std::max<int64_t>(rows, 1);
  const int64_t unit = shape.size() == 2 ? fp8_block_rows : 1;
  const int64_t row_bytes = numel(shape) / rows * static_cast<int64_t>(sizeof(float));
  const int64_t fit = static_cast<int64_t>(piece_bytes) / row_bytes / unit * unit;
  return std::min(rows, std::max(unit, fit));
}

// Rows [first, end) of this rank's local tensor i of `numel` elements, rows of `row` elements, made
// whole from its replicas' ranges (`range`: this replica's, ranks.moments). Collective over the
// tensor's replicas (ranks.moments.group_of(i)).
std::vector<float> gather_replica_rows(const StateRanks& ranks, size_t i, const std::vector<float>& range,
                                       int64_t numel, int64_t row, int64_t first, int64_t end) {
  const ReplicaSplit& split = ranks.moments.of(i);
  Communicator* replicas = ranks.moments.group_of(i);
  const std::vector<size_t> counts = split.counts(numel);
  const int64_t lo = first * row, hi = end * row;
  std::vector<size_t> parts;  // each replica's share of [lo, hi)
  int64_t at = 0;
  for (size_t c : counts) {
    const int64_t from = std::max(lo, at), to = std::min(hi, at + static_cast<int64_t>(c));
    parts.push_back(static_cast<size_t>(std::max<int64_t>(0, to - from)));
    at += static_cast<int64_t>(c);
  }
  const int64_t mine = split.first(numel), skip = std::max<int64_t>(0, lo - mine);
  const size_t me = static_cast<size_t>(replicas->rank());
  std::vector<float> rows(static_cast<size_t>(hi - lo));
  replicas->all_gather_v(range.data() + std::min<int64_t>(skip, static_cast<int64_t>(range.size())),
                         parts[me], rows.data(), parts.data());
  return rows;
}

// The local rows of tensor i that this rank's replicas gather for a piece (`cuts`): the ones this
// rank reads, or under MoE parallel folding for a tensor other than the routed experts' those any
// rank of its tensor-parallel place in the stage reads (its replicas span the expert-parallel
// ranks, of which only the first contributes the rows), alike on all of them.
std::pair<int64_t, int64_t> replica_rows_read(const std::vector<Cut>& cuts, const StateRanks& ranks,
                                              size_t i) {
  const ModelShard& s = ranks.shard;
  if (!ranks.moe_folding || ranks.moments.routed(i)) return local_rows_read(cuts, s.model_rank());
  int64_t first = 0, end = 0;
  for (int ep_rank = 0; ep_rank < s.ep; ++ep_rank) {
    ModelShard other = s;
    other.ep_rank = ep_rank;
    const auto [from, to] = local_rows_read(cuts, other.model_rank());
    if (from == to) continue;
    if (first == end) first = from, end = to;
    first = std::min(first, from), end = std::max(end, to);
  }
  return {first, end};
}

bool is_routed_expert(const ModelLayout& layout, size_t i) {
  for (const LayerTensors& l : layout.layers)
    if (static_cast<int>(i) == l.moe.gate_up || static_cast<int>(i) == l.moe.down) return true;
  return false;
}

// This rank's share of the writing: gathers every tensor's parts piece by piece (rows_per_piece),
// writes the parts it owns (the model like `source`, the optimizer's three tensors) and the source
// tensors the model does not use that fall to it, each piece encoded and appended to its file as
// it arrives. Collective over ranks.model_group (the writing replica's) and, when the moments are
// split over the data-parallel replicas (ranks.moments), over ranks.data_group: each piece's rows
// of the moments are gathered from the replicas' ranges first, so no rank holds a whole moment.
// A local failure (encoding, disk) is returned, not thrown, so the rank still takes part in every
// later gather.
std::exception_ptr write_rank_files(const fs::path& dir, const std::string& checkpoint, const Weights<float>* quantities[3],
                                    const StateRanks& ranks, SaveFootprint& footprint) {
  const ModelConfig& full = ranks.full;
  const int me = ranks.shard.model_rank(), size = ranks.shard.tp * ranks.shard.ep * ranks.shard.pp;
  const GroupPlacements g = group_placements(full, ranks.shard);
  const ModelLayout layout = make_layout(full);
  const SafetensorsCheckpoint source(checkpoint);  // deterministic on every rank: only headers read
  const Dtype fallback = parse_dtype(full.dtype);
  RankFiles model(dir, me, ranks.group_rank), optimizer(dir / kOptimizerFolder, me, ranks.group_rank);
  std::exception_ptr failure;
  auto local = [&](auto&& work) {  // this rank's own writing; the first failure stops it
    if (failure || !ranks.writes) return;
    try {
      work();
    } catch (...) {
      failure = std::current_exception();
    }
  };
  // How each tensor is written (alike on every rank): experts stored one tensor per expert are
  // written by block; a fused expert tensor is one tensor of the model directory, one writer's.
  std::vector<TensorWrite> plans;
  std::vector<char> expert;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& spec = layout.tensors[i];
    expert.push_back(is_routed_expert(layout, i));
    const bool by_block = expert.back() && pieces_like_source(source, full, spec.name, spec.shape).size() > 1;
    plans.push_back(plan_tensor(g, i, by_block));
  }
  // The tensors quantity q of rows [first, first + shape[0]) of tensor i is written as.
  auto optimizer_pieces = [&](size_t i, int q, const std::vector<int64_t>& shape, int64_t first) {
    const std::string name = kPrefixes[q] + layout.tensors[i].name;
    std::vector<TensorPiece> pieces = expert[i] ? expert_pieces(full, name, first, shape[0]) : std::vector<TensorPiece>{};
    if (pieces.empty()) pieces.push_back({name, shape, 0});
    return pieces;
  };
  auto part_shape = [&](size_t i) {
    std::vector<int64_t> shape = layout.tensors[i].shape;
    shape[0] /= plans[i].parts;
    return shape;
  };
  // The source's tensors the model does not use (mtp.*, model.visual.*), byte for byte, spread
  // over the ranks.
  std::vector<std::string> copied;
  // Declared first, in the order they are written: the files' headers.
  local([&] {
    for (size_t i = 0; i < layout.tensors.size(); ++i)
      for (int q = 0; q < 3; ++q)
        for (int64_t p = 0; p < plans[i].parts; ++p) {
          if (plans[i].writer[static_cast<size_t>(p)] != me) continue;
          const std::vector<int64_t> shape = part_shape(i);
          const int64_t first = p * shape[0];  // the part's first row: its first expert
          if (q == 0)
            for (const TensorPiece& piece : pieces_like_source(source, full, layout.tensors[i].name, shape, first))
              for (TensorDeclaration& t : declare_like_source(source, fallback, piece)) model.declare(std::move(t));
          for (const TensorPiece& piece : optimizer_pieces(i, q, shape, first)) optimizer.declare({piece.name, piece.shape, Dtype::f32});
        }
    const std::set<std::string> written = names_written_like_source(source, full);
    int k = 0;
    for (const std::string& name : source.names()) {
      if (written.count(name) || k++ % size != me) continue;
      const TensorEntry& e = source.entry(name);
      model.declare({name, e.shape, e.dtype});
      copied.push_back(name);
    }
    model.open();
    optimizer.open();
  });
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& spec = layout.tensors[i];
    const TensorWrite& plan = plans[i];
    const std::vector<int64_t>& local_shape = quantities[0]->layout.tensors[i].shape;
    const std::vector<int64_t> shape = part_shape(i);
    const bool fp8 = source.contains(spec.name) && source.entry(spec.name).dtype == Dtype::f8_e4m3;
    const int64_t rows = rows_per_piece(shape, fp8 ? source.fp8_block().first : 1, ranks.piece_bytes);
    for (int q = 0; q < 3; ++q)
      for (int64_t begin = 0; begin < shape[0]; begin += rows) {
        std::vector<int64_t> piece_shape = shape;
        piece_shape[0] = std::min(rows, shape[0] - begin);
        size_t held = 0;
        const std::vector<float>* values = &quantities[q]->values[i];
        std::vector<int64_t> rows_shape = local_shape;
        int64_t first_row = 0;
        std::vector<float> replica_rows;  // a moment's rows this piece reads, from the replicas' ranges
        if (q > 0 && ranks.moments.of(i).replicas() > 1) {
          const auto [first, end] = replica_rows_read(cut_rows(g, plan, i, begin, piece_shape[0]), ranks, i);
          replica_rows =
              gather_replica_rows(ranks, i, *values, numel(local_shape),
                                  numel(local_shape) / std::max<int64_t>(local_shape[0], 1), first, end);
          values = &replica_rows, first_row = first, rows_shape[0] = end - first;
        }
        if (!ranks.writes) continue;  // this replica only lent its ranges
        std::vector<std::vector<float>> parts =
            gather_rows(g, plan, i, me, values->data(), rows_shape, first_row, ranks.model_group, begin,
                        piece_shape[0], &held);
        held += replica_rows.size() * sizeof(float);
        footprint.largest_piece_bytes = std::max(footprint.largest_piece_bytes, held);
        for (int64_t p = 0; p < plan.parts; ++p) {
          const std::vector<float>& values = parts[static_cast<size_t>(p)];
          if (values.empty()) continue;
          local([&] {
            const int64_t first = p * shape[0] + begin;  // the piece's first row: its first expert
            size_t bytes = 0;  // encoded, held at once
            if (q == 0)  // the model tensor as the source stores it
              for (const TensorPiece& piece : pieces_like_source(source, full, spec.name, piece_shape, first)) {
                size_t encoded_bytes = 0;
                for (const EncodedTensor& t : encode_like_source(source, fallback, piece, values.data())) {
                  model.append(t.name, t.bytes.data(), t.bytes.size());
                  encoded_bytes += t.bytes.size();
                }
                bytes = std::max(bytes, encoded_bytes);
              }
            for (const TensorPiece& piece : optimizer_pieces(i, q, piece_shape, first)) {
              const EncodedTensor t = encode_floats(piece.name, piece.shape, values.data() + piece.offset, Dtype::f32);
              optimizer.append(t.name, t.bytes.data(), t.bytes.size());
              bytes = std::max(bytes, t.bytes.size());
            }
            footprint.largest_piece_bytes = std::max(footprint.largest_piece_bytes, held + bytes);
          });
        }
      }
  }
  local([&] {
    for (const std::string& name : copied) {
      const TensorEntry& e = source.entry(name);
      model.append(name, source.stored_bytes(name), static_cast<size_t>(e.end - e.begin));
    }
    model.commit();  // before `source` unmaps the stored bytes
    optimizer.commit();
    footprint.bytes_written = model.written() + optimizer.written();
  });
  return failure;
}

// The index of a folder of safetensors files (HF's model.safetensors.index.json), from the
// files' headers: every tensor once.
void write_index(const fs::path& dir) {
  nlohmann::json weight_map = nlohmann::json::object();
  size_t total = 0;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const SafetensorsFile file(f.string());
    for (const auto& [name, e] : file.tensors()) {
      if (weight_map.contains(name))
        throw Error(MLPT_INTERNAL, dir.string() + ": tensor '" + name + "' written twice (" + weight_map[name].get<std::string>() +
                                       " and " + f.filename().string() + ")");
      weight_map[name] = f.filename().string();
      total += e.end - e.begin;
    }
  }
  const nlohmann::json doc = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic((dir / "model.safetensors.index.json").string(), doc.dump(2) + "\n");
}

// The complete new directory swapped in with one atomic call; the old one is removed after.
void swap_in(const fs::path& tmp, const fs::path& target) {
  std::error_code ec;
  if (fs::exists(target)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      throw Error(MLPT_INTERNAL, target.string() + ": atomic exchange failed: " + std::strerror(errno));
    fs::remove_all(tmp, ec);
  } else {
    fs::rename(tmp, target);
  }
}

std::string layout_name(int tp, int ep, int pp) {
  return "tensor_parallel " + std::to_string(tp) + " x expert_parallel " + std::to_string(ep) +
         (pp > 1 ? " x pipeline_parallel " + std::to_string(pp) : "");
}

}  // namespace

SaveFootprint save_trainer_state(const std::string& path, const std::string& checkpoint, const Weights<float>& weights,
                                 const Weights<float>& m, const Weights<float>& v, int64_t step, uint64_t version,
                                 const StateRanks& ranks) {
  SaveFootprint footprint;
  if (path.empty()) throw Error(MLPT_INVALID_ARGUMENT, "save_state: empty path");
  if (ranks.full.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_UNIMPLEMENTED, path + ": saving writes Qwen3.5 names; convert a qwen3_next config first");
  const fs::path target = fs::absolute(path);
  // One name every rank agrees on (the ranks may be on several hosts sharing the file system).
  const fs::path tmp = target.string() + ".saving";
  const bool leader = ranks.writes && ranks.shard.model_rank() == 0;  // group rank 0
  std::exception_ptr error;  // this rank's own, rethrown as it is
  auto step_ok = [&](auto&& work) {  // one phase: every rank learns whether all of them succeeded
    if (!error) {
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (ranks.all_ok(!error)) return;
    std::error_code ec;
    if (leader) fs::remove_all(tmp, ec);
    if (error) std::rethrow_exception(error);
    throw Error(MLPT_ABORTED, "save_state " + path +
                                  ": another rank of the trainer group failed (its error says why); the previous state is unchanged");
  };
  step_ok([&] {
    if (!leader) return;
    std::error_code ec;
    fs::remove_all(tmp, ec);  // a save that died half way
    fs::create_directories(tmp / kOptimizerFolder);
  });
  step_ok([&] {
    if (!ranks.writes && !ranks.moments.split()) return;
    const Weights<float>* quantities[3] = {&weights, &m, &v};
    error = write_rank_files(tmp, checkpoint, quantities, ranks, footprint);
  });
  step_ok([&] {
    if (!leader) return;
    write_index(tmp);
    write_index(tmp / kOptimizerFolder);
    write_file_atomic((tmp / "config.json").string(), ranks.full.source.dump(2) + "\n");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})  // a state is also a checkpoint
      if (fs::exists(fs::path(checkpoint) / f)) fs::copy_file(fs::path(checkpoint) / f, tmp / f);
    const nlohmann::json state = {{"format", kStateFormat},
                                  {"format_version", kFormatVersion},
                                  {"step", step},
                                  {"weight_version", version},
                                  {"layout",
                                   {{"tensor_parallel", ranks.shard.tp},
                                    {"expert_parallel", ranks.shard.ep},
                                    {"expert_tensor_parallel", ranks.shard.etp},
                                    {"pipeline_parallel", ranks.shard.pp},
                                    {"data_parallel", ranks.data_parallel}}}};
    write_file_atomic((tmp / "trainer_state.json").string(), state.dump(2) + "\n");
    swap_in(tmp, target);
  });
  return footprint;
}

TrainerState load_trainer_state(const std::string& path, const Weights<float>& current, const StateRanks& ranks) {
  auto corrupt = [&](const std::string& why) { return Error(MLPT_DATA_LOSS, "trainer state " + path + ": " + why); };
  nlohmann::json state;
  ModelConfig cfg;
  try {
    state = parse_json_file(path + "/trainer_state.json");
    cfg = load_model_config(path + "/config.json");
  } catch (const Error& e) {
    throw corrupt(e.what());
  }
  if (!state.is_object() || state.value("format", "") != kStateFormat || !state.contains("step") ||
      !state["step"].is_number_integer() || !state.contains("weight_version") || !state["weight_version"].is_number_unsigned())
    throw corrupt("trainer_state.json is not a " + std::string(kStateFormat) + " document");
  if (state.value("format_version", 0) != kFormatVersion)
    throw Error(MLPT_INVALID_ARGUMENT, "trainer state " + path + " has format_version " + state.value("format_version", nlohmann::json()).dump() +
                                           "; this trainer reads " + std::to_string(kFormatVersion) +
                                           " (a state of version 1 loads as a checkpoint, without its optimizer moments)");
  const ModelLayout saved = make_layout(cfg), wanted = make_layout(ranks.full);
  if (saved.tensors.size() != wanted.tensors.size())
    throw Error(MLPT_INVALID_ARGUMENT, "trainer state " + path + " was saved for another model (tensor count differs)");
  for (size_t i = 0; i < saved.tensors.size(); ++i)
    if (saved.tensors[i].name != wanted.tensors[i].name || saved.tensors[i].shape != wanted.tensors[i].shape)
      throw Error(MLPT_INVALID_ARGUMENT, "trainer state " + path + " was saved for another model: tensor '" +
                                             saved.tensors[i].name + "' differs");
  TrainerState out;
  const nlohmann::json layout = state.value("layout", nlohmann::json::object());
  out.saved_layout = layout_name(layout.value("tensor_parallel", 1), layout.value("expert_parallel", 1),
                                 layout.value("pipeline_parallel", 1));
  try {
    const SafetensorsCheckpoint optimizer(path + "/" + kOptimizerFolder);
    Weights<float>* into[3] = {&out.weights, &out.m, &out.v};
    for (int q = 0; q < 3; ++q) {
      std::function<void(size_t, std::vector<float>&)>
          keep;  // a moment split over the replicas: this one's range
      if (q > 0 && ranks.moments.split())
        keep = [&](size_t i, std::vector<float>& t) {
          const ReplicaSplit& split = ranks.moments.of(i);
          const int64_t n = static_cast<int64_t>(t.size()), first = split.first(n);
          t = std::vector<float>(t.begin() + first, t.begin() + first + split.count(n));
        };
      *into[q] = read_shard_weights<float>(cfg, optimizer, ranks.shard, kPrefixes[q], keep);
      into[q]->config = current.config;  // the running config document
    }
  } catch (const Error& e) {
    throw corrupt(e.what());
  }
  for (size_t i = 0; i < current.layout.tensors.size(); ++i)
    if (out.weights.layout.tensors[i].shape != current.layout.tensors[i].shape)
      throw Error(MLPT_INTERNAL, "trainer state " + path + ": tensor '" + current.layout.tensors[i].name +
                                     "' read in another shard shape than this rank holds");
  out.step = state["step"].get<int64_t>();
  out.version = state["weight_version"].get<uint64_t>();
  return out;
}

}  // namespace mlpt::ref
