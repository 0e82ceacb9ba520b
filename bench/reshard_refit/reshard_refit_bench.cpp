// bench_reshard_refit: one refit across processes on this machine over the UCX transport (loopback:
// CMA / shared memory / TCP as UCX picks), three ways, each timed from "go" to the moment every
// receiver holds the version in its own layout, and each against ucx_perftest tag_bw measured in
// the same run with the transport's message size (16 MiB buckets):
//   dense     1 sender rank (whole tensors) -> 3 receivers, whole tensors each (a broadcast refit);
//   sparse    the same, with the run's sparse codec (core/refit: only the changed BF16 elements,
//             dense per tensor where denser); encode, send and apply are all in the time;
//   resharded 2 sender ranks (row shards: each holds half the rows of every tensor) -> 3 receivers
//             that want column shards (a third of the last dimension of every tensor): each rank
//             sends each receiver just the pieces it wants (sender ranks, transport_ucx README);
//   layouts   the model's own layouts (--layouts, default tp2ep2/tp4): the sender ranks hold the
//             boxes a trainer of the first layout holds (model/parallel/shard_boxes: TP rows and
//             columns, GDN's q|k|v blocks, replicated KV heads, blocks of experts, norms whole on
//             every rank), the receivers want what an engine of the second layout's ranks holds.
// Bytes on the wire per version: dense 3 x the model, sparse 3 x the message, resharded 1 x the
// model (every element once, to the one receiver that wants it), layouts what every engine rank
// holds (tensors every rank holds whole count once per rank). "vs perftest" is the achieved
// rate (those bytes / time) over ucx_perftest's rate for one sender-receiver pair, marked c where
// perftest's one 16 MiB buffer stays in cache (a copy of it runs over 1.25x a copy of the weights).
// On loopback the wire is itself a copy (CMA, shared memory), so the cores' copies bound a refit:
// "copies/B" counts, from the pieces each receiver pulls, the bytes copied per byte on the wire:
// the wire's own copy, a sender's cut of a piece that is not one run of its shard or is packed
// with others (below the packing threshold), and a receiver's copy of a piece that is not one run
// of its wanted tensor or came packed. Were copies the only cost, a refit's rate per wire byte
// would be dense's times dense's copies/B over its own ("copies" beside the measured ratio).
//
// Tensor sets, from the reference model's own tensor lists (as bench_refit_path), BF16:
//   small       configs/models/small-100m.json whole (~100M parameters);
//   397b-layers configs/qwen35-397b/config.json, layers 0 (GDN) and 3 (attention) with 8 of their
//               512 experts (a whole layer is ~13 GB).
// Every dense and resharded version is checked bit for bit on every receiver (values are a hash of
// tensor, element and version); the sparse refit's receivers check every tensor's checksum.
//
//   bench_reshard_refit [--models small,397b] [--refits dense,sparse,resharded,layouts] [--layouts FROM/TO]
//                       [--reps N] [--changed-fraction F] [--checksum] [--no-perftest]
// A layout is written tpA[epB][etpC] (tensor, expert and expert-tensor parallel degrees; ETP 1 by default).
// The sender ranks and receivers are this executable started with --sender / --receiver (internal).
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/plugin/plugin.hpp"
#include "refit_receiver.hpp"
#include "refit_sender.hpp"
#include "mlpt/sdk/reshard.hpp"
#include "mlpt/transport.h"
#include "shard_pulls.hpp"
#include "transport_wire/weight_layout.hpp"
#include "model/config.hpp"
#include "model/layout.hpp"
#include "model/parallel/model_parallel.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/shard_weights.hpp"
#include "ucx_perftest.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using mlpt::sdk::Box;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int kReceivers = 3;
constexpr uint64_t kBucket = 16ull << 20;
constexpr DLDataType kBf16{kDLBfloat, 16, 1};

// ---- the tensor sets ----
struct TensorList {
  mlpt::ref::ModelConfig config;  // the model they are (some of) the tensors of
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  uint64_t bytes = 0;
};

TensorList tensor_list(const std::string& model) {
  const std::string configs = std::string(MLPT_SOURCE_DIR) + "/configs/";
  TensorList out;
  std::vector<std::string> only;
  mlpt::ref::ModelConfig config;
  if (model == "small") {
    config = mlpt::ref::load_model_config(configs + "models/small-100m.json");
  } else if (model == "397b") {
    config = mlpt::ref::load_model_config(configs + "qwen35-397b/config.json");
    config.num_experts = 8;  // of 512: the subset fits this machine's memory, five times over
    only = {config.prefix() + "layers.0.", config.prefix() + "layers.3."};
  } else {
    throw std::runtime_error("unknown model '" + model + "' (small, 397b)");
  }
  for (const auto& t : mlpt::ref::make_layout(config).tensors) {
    bool keep = only.empty();
    for (const auto& p : only) keep |= t.name.rfind(p, 0) == 0;
    if (!keep) continue;
    out.names.push_back(t.name);
    out.shapes.push_back(t.shape);
    out.bytes += static_cast<uint64_t>(t.numel()) * 2;
  }
  out.config = config;
  return out;
}

// ---- the model's layouts ----
struct Layout {
  int tp = 1, ep = 1, etp = 1;
  int ranks() const { return tp * ep; }
  std::string text() const {
    return "tp" + std::to_string(tp) + (ep > 1 ? "ep" + std::to_string(ep) : "") +
           (etp > 1 ? "etp" + std::to_string(etp) : "");
  }
};

Layout parse_layout(const std::string& s) {
  Layout l;
  size_t at = 0;
  while (at < s.size()) {
    const size_t digits = s.find_first_of("0123456789", at);
    if (digits == std::string::npos)
      throw std::runtime_error("layout '" + s + "': a degree is missing after '" + s.substr(at) + "'");
    const std::string key = s.substr(at, digits - at);
    size_t used = 0;
    const int value = std::stoi(s.substr(digits), &used);
    if (key == "tp")
      l.tp = value;
    else if (key == "ep")
      l.ep = value;
    else if (key == "etp")
      l.etp = value;
    else
      throw std::runtime_error("layout '" + s + "': '" + key + "' is not tp, ep or etp");
    at = digits + used;
  }
  if (l.tp < 1 || l.ep < 1 || (l.etp != 1 && l.etp != l.tp))
    throw std::runtime_error("layout '" + s + "': degrees >= 1, etp 1 or tp");
  return l;
}

// One box of one tensor of the list (`tensor`: its index there, which seeds its values).
struct Piece {
  size_t tensor = 0;
  Box box;
};

// What rank `rank` of `layout` holds of the list's tensors: the model's own shard placements
// (the boxes a trainer or engine rank of that layout loads), in global coordinates.
std::vector<Piece> layout_pieces(const TensorList& list, const Layout& layout, int rank) {
  using namespace mlpt::ref;
  const ModelShard shard = ModelShard::of_world_rank(layout.tp, layout.ep, rank, layout.etp);
  const ModelLayout local = shard_layout(list.config, shard);
  const std::vector<ShardPlacement> placements = shard_placements(list.config, local, shard);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < list.names.size(); ++i) index[list.names[i]] = i;
  std::vector<Piece> out;
  for (size_t i = 0; i < local.tensors.size(); ++i) {
    const auto it = index.find(local.tensors[i].name);
    if (it == index.end()) continue;  // not in the list (another layer)
    for (const ShardBox& b : placements[i].boxes) out.push_back({it->second, Box{b.global_offset, b.extent}});
  }
  return out;
}

// The pieces of the bench's own scenarios: whole tensors, row or column shards.
std::vector<Piece> whole_pieces(const TensorList& list) {
  std::vector<Piece> out;
  for (size_t i = 0; i < list.shapes.size(); ++i)
    out.push_back({i, Box{std::vector<int64_t>(list.shapes[i].size(), 0), list.shapes[i]}});
  return out;
}

// Part `index` of `parts` along dimension `dim` (the first parts one larger); 0-d tensors whole.
Box split(const std::vector<int64_t>& shape, size_t dim, int64_t parts, int64_t index) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  if (shape.empty()) return b;
  const int64_t n = shape[dim], base = n / parts, extra = n % parts;
  b.offset[dim] = index * base + std::min(index, extra);
  b.extent[dim] = base + (index < extra ? 1 : 0);
  return b;
}
Box rows(const std::vector<int64_t>& shape, int64_t rank, int64_t ranks) {
  return split(shape, 0, ranks, rank);
}
Box columns(const std::vector<int64_t>& shape, int64_t index, int64_t count) {
  return split(shape, shape.empty() ? 0 : shape.size() - 1, count, index);
}

// The value of element `flat` (global row-major index) of tensor `t` at `version`: a hash, so that
// any rank can make any part and any receiver can check it.
uint16_t value_at(size_t t, uint64_t flat, uint64_t version) {
  uint64_t x = (static_cast<uint64_t>(t) << 40) ^ flat ^ (version << 56) ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return static_cast<uint16_t>(x >> 17);
}

// Fills `box` of tensor `t` (global `shape`), row-major, at `version`.
void fill_box(size_t t, const std::vector<int64_t>& shape, const Box& box, uint64_t version, uint16_t* out) {
  const size_t nd = shape.size();
  if (box.elements() == 0) return;
  if (nd == 0) {
    out[0] = value_at(t, 0, version);
    return;
  }
  std::vector<int64_t> stride(nd, 1), at(nd, 0);
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * shape[d + 1];
  const int64_t run = box.extent[nd - 1];
  for (;;) {
    uint64_t flat = 0;
    for (size_t d = 0; d < nd; ++d)
      flat += static_cast<uint64_t>((box.offset[d] + (d + 1 < nd ? at[d] : 0)) * stride[d]);
    for (int64_t k = 0; k < run; ++k) *out++ = value_at(t, flat + static_cast<uint64_t>(k), version);
    size_t d = nd - 1;
    while (d > 0 && ++at[d - 1] == box.extent[d - 1]) at[d - 1] = 0, --d;
    if (d == 0) return;
  }
}

// One rank's part of the tensor set: its pieces, their memory and the ABI views (a tensor of
// several pieces is several views of one name).
struct Part {
  std::vector<Piece> pieces;
  std::vector<std::vector<int64_t>> globals;
  std::vector<std::vector<uint16_t>> data;
  std::vector<mlpt_named_tensor> views;
  std::vector<mlpt_tensor_shard> shards;
  uint64_t bytes = 0;

  Part(const TensorList& list, std::vector<Piece> p, bool allocate) : pieces(std::move(p)) {
    const size_t n = pieces.size();
    globals.resize(n), data.resize(n), views.resize(n), shards.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const Box& box = pieces[i].box;
      const std::string& name = list.names[pieces[i].tensor];
      globals[i] = list.shapes[pieces[i].tensor];
      const auto elements = static_cast<size_t>(box.elements());
      if (allocate) data[i].resize(elements);
      bytes += elements * 2;
      mlpt_named_tensor& v = views[i];
      v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      v.name = {name.data(), name.size()};
      v.tensor.data = allocate && elements ? data[i].data() : nullptr;
      v.tensor.device = {kDLCPU, 0};
      v.tensor.ndim = static_cast<int32_t>(box.extent.size());
      v.tensor.dtype = kBf16;
      v.tensor.shape = pieces[i].box.extent.data();
      shards[i] =
          mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, globals[i].data(), pieces[i].box.offset.data()};
    }
  }
  void fill(uint64_t version) {
    for (size_t i = 0; i < pieces.size(); ++i)
      fill_box(pieces[i].tensor, globals[i], pieces[i].box, version, data[i].data());
  }
};

using bench_ucx::Transport;

std::string config_of(int port, bool checksum) {
  return R"({"address": "127.0.0.1:)" + std::to_string(port) + R"(", "bucket_bytes": )" +
         std::to_string(kBucket) + R"(, "verify_checksum": )" + (checksum ? "true" : "false") +
         ", \"timeout_ms\": 120000";
}

// ---- a sender rank: "prep V" makes version V, "go V" sends it; answers "prepared V", "sent V BYTES" ----
// The layouts of the "layouts" scenario: FROM/TO.
std::pair<Layout, Layout> parse_layouts(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) throw std::runtime_error("--layouts '" + s + "': FROM/TO, e.g. tp2ep2/tp4");
  return {parse_layout(s.substr(0, slash)), parse_layout(s.substr(slash + 1))};
}

std::vector<Piece> sender_pieces(const TensorList& list, const std::string& scenario,
                                 const std::string& layouts, int rank, int ranks) {
  if (scenario == "layouts") return layout_pieces(list, parse_layouts(layouts).first, rank);
  std::vector<Piece> out = whole_pieces(list);
  if (scenario == "resharded")
    for (auto& p : out) p.box = rows(list.shapes[p.tensor], rank, ranks);
  return out;
}

std::vector<Piece> receiver_pieces(const TensorList& list, const std::string& scenario,
                                   const std::string& layouts, int index) {
  if (scenario == "layouts") return layout_pieces(list, parse_layouts(layouts).second, index);
  std::vector<Piece> out = whole_pieces(list);
  if (scenario == "resharded")
    for (auto& p : out) p.box = columns(list.shapes[p.tensor], index, kReceivers);
  return out;
}

int run_sender(const std::string& model, const std::string& scenario, int rank, int ranks, int port,
               bool checksum, double fraction, const std::string& layouts, int receivers) {
  const TensorList list = tensor_list(model);
  Part part(list, sender_pieces(list, scenario, layouts, rank, ranks), true);
  Transport t;
  const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {"trainer", 7}, rank, ranks};
  mlpt_transport* tx =
      t.create(MLPT_TRANSPORT_SENDER,
               config_of(port, checksum) + R"(, "receivers": )" + std::to_string(receivers) + "}", &group);
  mlpt::sparse_refit::RefitSender encoder;
  std::mt19937_64 rng(7);
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string what;
    uint64_t v = 0;
    in >> what >> v;
    if (what == "prep") {
      if (scenario != "sparse" || v == 1) {
        part.fill(v);
      } else {  // an optimizer step as the refit sees it: `fraction` of the elements get new bits
        for (auto& d : part.data)
          for (size_t j = 0, k = static_cast<size_t>(static_cast<double>(d.size()) * fraction); j < k; ++j)
            d[rng() % d.size()] ^= 1;
      }
      std::printf("prepared %llu\n", static_cast<unsigned long long>(v));
    } else if (what == "go") {
      mlpt_transport_send_args a{};
      a.struct_size = MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE;
      a.transport = tx;
      a.version = v;
      a.timeout_ms = 120000;
      uint64_t bytes = part.bytes;
      if (scenario == "sparse") {
        const auto& message = encoder.prepare(v, part.views.data(), part.views.size());
        a.tensors = message.data();
        a.num_tensors = message.size();
        bytes = encoder.stats().bytes;
      } else {
        a.tensors = part.views.data();
        a.num_tensors = part.views.size();
        a.shards = part.shards.data();
      }
      mlpt::plugin::check(t.component, t.api->send(&a), "send");
      std::printf("sent %llu %llu\n", static_cast<unsigned long long>(v),
                  static_cast<unsigned long long>(bytes));
    } else if (what == "quit") {
      break;
    }
    std::fflush(stdout);
  }
  t.api->destroy(tx);
  return 0;
}

// ---- a receiver: receives `versions` versions in its layout; "got V" once it holds V, then on
// "check V" checks it and answers "ok V" ----
int run_receiver(const std::string& model, const std::string& scenario, int index, int senders, int port,
                 bool checksum, int versions, const std::string& layouts) {
  const TensorList list = tensor_list(model);
  const std::vector<Piece> pieces = receiver_pieces(list, scenario, layouts, index);
  Part want(list, pieces, false);
  const bool wants_layout = scenario == "resharded" || scenario == "layouts";
  Transport t;
  mlpt_transport* rx = t.create(MLPT_TRANSPORT_RECEIVER,
                                config_of(port, checksum) + R"(, "senders": )" + std::to_string(senders) +
                                    R"(, "name": "bench-receiver-)" + std::to_string(index) + "\"}",
                                nullptr);
  mlpt::sparse_refit::RefitReceiver decoder;
  std::vector<uint16_t> expect;
  for (uint64_t v = 1; v <= static_cast<uint64_t>(versions); ++v) {
    mlpt_transport_receive_args a{};
    a.struct_size = MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE;
    a.transport = rx;
    a.min_version = v;
    a.timeout_ms = 120000;
    if (wants_layout)
      a.want_tensors = want.views.data(), a.want_shards = want.shards.data(), a.num_want = want.views.size();
    mlpt::plugin::check(t.component, t.api->receive(&a), "receive");
    const mlpt_named_tensor* got = a.out_tensors;
    size_t count = a.out_num_tensors;
    if (scenario == "sparse") {  // checks every tensor's checksum as it rebuilds it
      const auto& rebuilt = decoder.apply(a.out_version, a.out_tensors, a.out_num_tensors);
      got = rebuilt.data(), count = rebuilt.size();
    }
    std::printf("got %llu\n", static_cast<unsigned long long>(a.out_version));
    std::fflush(stdout);
    // Checked once every receiver holds it, so that no check takes a core from a refit still running.
    for (std::string line; std::getline(std::cin, line) && line.rfind("check", 0) != 0;) {
    }
    std::string bad;
    if (count != pieces.size())
      bad = std::to_string(count) + " tensors, not " + std::to_string(pieces.size());
    for (size_t i = 0; bad.empty() && scenario != "sparse" && i < count; ++i) {
      const Piece& piece = pieces[i];
      expect.resize(static_cast<size_t>(piece.box.elements()));
      fill_box(piece.tensor, list.shapes[piece.tensor], piece.box, a.out_version, expect.data());
      if (std::memcmp(static_cast<const uint8_t*>(got[i].tensor.data) + got[i].tensor.byte_offset,
                      expect.data(), expect.size() * 2) != 0)
        bad = list.names[piece.tensor] + " differs";
    }
    mlpt_transport_release_args r{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, rx, a.out_version, nullptr};
    mlpt::plugin::check(t.component, t.api->release_received(&r), "release_received");
    std::printf("%s %llu %s\n", bad.empty() ? "ok" : "bad", static_cast<unsigned long long>(a.out_version),
                bad.c_str());
    std::fflush(stdout);
  }
  t.api->destroy(rx);
  return 0;
}

// ---- the driver ----
// A child with its stdin and stdout on pipes.
class Proc {
 public:
  explicit Proc(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0)
      throw std::runtime_error("cannot start " + argv[0]);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]), close(out[1]);
    to_ = in[1], from_ = out[0];
  }
  ~Proc() {
    close(to_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(from_);
  }
  void tell(const std::string& line) {
    std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
      throw std::runtime_error("a child went away");
  }
  // The next line that starts with `word` (log lines and others skipped); throws after the timeout.
  std::string expect(const std::string& word, int timeout_ms = 300000) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      for (auto nl = buffer_.find('\n'); nl != std::string::npos; nl = buffer_.find('\n')) {
        std::string l = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (l.rfind(word, 0) == 0) return l;
        if (l.rfind("bad", 0) == 0 || l.rfind("error", 0) == 0)
          throw std::runtime_error("a child said: " + l);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) throw std::runtime_error("no '" + word + "' from a child in time");
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) throw std::runtime_error("a child ended before saying '" + word + "'");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

// How many sender ranks and receivers a scenario has, and the bytes its receivers want per version.
struct Ranks {
  int senders = 1, receivers = kReceivers;
  uint64_t wanted = 0;
};

Ranks ranks_of(const TensorList& list, const std::string& scenario, const std::string& layouts) {
  Ranks r;
  if (scenario == "resharded") r.senders = 2;
  if (scenario == "layouts") {
    const auto [from, to] = parse_layouts(layouts);
    r.senders = from.ranks(), r.receivers = to.ranks();
  }
  for (int j = 0; j < r.receivers; ++j)
    for (const Piece& p : receiver_pieces(list, scenario, layouts, j))
      r.wanted += static_cast<uint64_t>(p.box.elements()) * 2;
  return r;
}

// Bytes copied per byte on the wire, from the moves of each receiver's pieces (see the top).
double copies_per_wire_byte(const TensorList& list, const std::string& scenario, const std::string& layouts,
                            const Ranks& ranks) {
  using mlpt::transport::ucx::contiguous_in;
  std::vector<std::vector<mlpt::sdk::Shard>> held(list.names.size());  // per tensor: every sender's boxes
  for (int s = 0; s < ranks.senders; ++s)
    for (const Piece& p : sender_pieces(list, scenario, layouts, s, ranks.senders)) held[p.tensor].push_back({s, p.box});
  // Whole tensors from one rank (dense, sparse) are packed once per version for every receiver, and
  // each receiver hands over what landed as it is.
  const bool whole = scenario == "dense" || scenario == "sparse";
  double wire = 0, copied = 0;
  for (int j = 0; j < ranks.receivers; ++j) {
    for (const Piece& w : receiver_pieces(list, scenario, layouts, j)) {
      const auto& sources = held[w.tensor];
      for (const auto& m : mlpt::sdk::plan_reshard(list.names[w.tensor], list.shapes[w.tensor], sources,
                                                   {mlpt::sdk::Shard{0, w.box}})) {
        const double bytes = static_cast<double>(m.box.elements()) * 2;
        const bool packed = bytes < static_cast<double>(mlpt::transport::kPackBelow);
        wire += bytes;
        if ((packed || !contiguous_in(sources[m.from_shard].box, m.box)) && (!whole || j == 0)) copied += bytes;
        if (!whole && (packed || !contiguous_in(w.box, m.box))) copied += bytes;
      }
    }
  }
  return wire > 0 ? (wire + copied) / wire : 0;
}

struct Result {
  double best = 0, median = 0, worst = 0;  // seconds until every receiver held the version
  uint64_t wire = 0;                       // bytes on the wire per version (the timed ones)
  Ranks ranks;                             // who sent and received
  std::string error;
};

Result measure(const std::string& self, const std::string& model, const std::string& scenario,
               const TensorList& list, int reps, bool checksum, double fraction, const std::string& layouts) {
  // Two warm-ups: version 1 connects, plans and faults in one set of buffers; version 2 the second
  // set (a receiver holds one version while the next lands), which a steady-state refit reuses.
  constexpr int kWarmups = 2;
  const int versions = kWarmups + reps;
  const int port = free_port();
  Result r;
  try {
    r.ranks = ranks_of(list, scenario, layouts);  // a layout the model cannot take fails this row
    const Ranks& ranks = r.ranks;
    const int senders = ranks.senders;
    std::vector<std::unique_ptr<Proc>> tx, rx;
    const std::string cs = checksum ? "1" : "0";
    for (int s = 0; s < senders; ++s)
      tx.push_back(std::make_unique<Proc>(std::vector<std::string>{
          self, "--sender", model, scenario, std::to_string(s), std::to_string(senders), std::to_string(port),
          cs, std::to_string(fraction), layouts, std::to_string(ranks.receivers)}));
    for (auto& p : tx) p->expect("ready");
    for (int j = 0; j < ranks.receivers; ++j)
      rx.push_back(std::make_unique<Proc>(std::vector<std::string>{
          self, "--receiver", model, scenario, std::to_string(j), std::to_string(senders),
          std::to_string(port), cs, std::to_string(versions), layouts}));
    std::vector<double> times;
    for (int v = 1; v <= versions; ++v) {
      const std::string vs = std::to_string(v);
      for (auto& p : tx) p->tell("prep " + vs);
      for (auto& p : tx) p->expect("prepared " + vs);
      const auto t0 = Clock::now();
      for (auto& p : tx) p->tell("go " + vs);
      for (auto& p : rx) p->expect("got " + vs);
      const double took = seconds_since(t0);
      for (auto& p : rx) p->tell("check " + vs);
      uint64_t sent = 0;
      for (auto& p : tx) sent += std::stoull(p->expect("sent " + vs).substr(6 + vs.size()));
      for (auto& p : rx) p->expect("ok " + vs);
      if (v <= kWarmups) continue;
      times.push_back(took);
      // Dense and sparse: every receiver gets what the one rank sent. Resharded: every element once.
      // Layouts: what the receivers want (a tensor every engine rank holds whole, once per rank).
      r.wire = scenario == "resharded" ? list.bytes
               : scenario == "layouts" ? ranks.wanted
                                       : ranks.receivers * sent;
    }
    for (auto& p : tx) p->tell("quit");
    std::sort(times.begin(), times.end());
    r.best = times.front(), r.median = times[times.size() / 2], r.worst = times.back();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 11 && std::string(argv[1]) == "--sender")
      return run_sender(argv[2], argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]),
                        std::string(argv[7]) == "1", std::stod(argv[8]), argv[9], std::stoi(argv[10]));
    if (argc == 10 && std::string(argv[1]) == "--receiver")
      return run_receiver(argv[2], argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6]),
                          std::string(argv[7]) == "1", std::stoi(argv[8]), argv[9]);
  } catch (const std::exception& e) {
    std::printf("error %s\n", e.what());
    std::fflush(stdout);
    return 2;
  }
  std::vector<std::string> models = {"small", "397b"};
  int reps = 3;
  double fraction = 0.015;
  std::vector<std::string> refits = {"dense", "sparse", "resharded", "layouts"};
  std::string layouts = "tp2ep2/tp4";
  bool checksum = false, perftest = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--models" && i + 1 < argc) {
      models.clear();
      std::stringstream s(argv[++i]);
      for (std::string m; std::getline(s, m, ',');) models.push_back(m);
    } else if (a == "--refits" && i + 1 < argc) {
      refits.clear();
      std::stringstream s(argv[++i]);
      for (std::string m; std::getline(s, m, ',');) refits.push_back(m);
    } else if (a == "--layouts" && i + 1 < argc) {
      layouts = argv[++i];
      try {
        parse_layouts(layouts);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 64;
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--changed-fraction" && i + 1 < argc) {
      fraction = std::stod(argv[++i]);
    } else if (a == "--checksum") {
      checksum = true;
    } else if (a == "--no-perftest") {
      perftest = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--models small,397b] [--refits dense,sparse,resharded,layouts] [--layouts "
                   "FROM/TO] [--reps N] "
                   "[--changed-fraction F] [--checksum] [--no-perftest]\n",
                   argv[0]);
      return 64;
    }
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::printf(
      "bench_reshard_refit: %d receivers (layouts: one per engine rank), 16 MiB buckets, checksums %s, %d "
      "timed refits per row after two warm-ups (medians); sparse: "
      "%.2f%% of the elements change per step\n",
      kReceivers, checksum ? "on" : "off", reps, 100 * fraction);
  constexpr const char* kPerftestAlloc = "mmap";
  std::printf("UCX_TLS=%s (the same environment for ucx_perftest)\n",
              std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "unset");
  bool cached = false;  // a perftest baseline was cache-resident
  for (const auto& model : models) {
    const TensorList list = tensor_list(model);
    // perftest's buffers on the kind of memory this bench's weights are on (std::vector: 4 KiB pages).
    const auto pt = perftest ? bench_ucx::perftest_median(kBucket, list.bytes, false, 3, kPerftestAlloc)
                             : bench_ucx::PerftestRate{};
    const auto pe = perftest ? bench_ucx::perftest_median(kBucket, list.bytes, true, 3, kPerftestAlloc)
                             : bench_ucx::PerftestRate{};
    // perftest sends every message from one buffer: where a copy of one message runs well above a
    // copy through the weight set, its rate is a cache-resident figure and "vs perftest" is marked c.
    const double reused = perftest ? bench_ucx::reused_memcpy_gbps(kBucket, 3) : 0;
    const double streaming = perftest ? bench_ucx::streaming_memcpy_gbps(list.bytes, 3) : 0;
    const bool in_cache = perftest && bench_ucx::perftest_in_cache(reused, streaming);
    cached = cached || in_cache;
    std::printf(
        "\n%s: %zu tensors, %.1f MiB BF16; UCX_ALLOC_PRIO=mmap ucx_perftest tag_bw 16 MiB (buffers on 4 KiB "
        "pages, as the weights), median of 3: %.2f GB/s (%.2f-%.2f); "
        "with -e, the "
        "transport's error mode: %.2f GB/s (%.2f-%.2f)\n",
        model.c_str(), list.names.size(), static_cast<double>(list.bytes) / 1048576.0, pt.median, pt.low,
        pt.high, pe.median, pe.low, pe.high);
    if (perftest)
      std::printf("  memcpy of one 16 MiB message again and again %.2f GB/s, through the %.1f MiB of weights %.2f "
                  "GB/s%s\n",
                  reused, static_cast<double>(list.bytes) / 1048576.0, streaming,
                  in_cache ? ": perftest's buffer stays in cache (c)" : "");
    std::printf("  %-10s %-12s %12s %14s %10s %19s %9s %11s %9s %10s %9s %19s\n", "refit", "ranks", "wire MiB/v",
                "MiB/receiver", "median s", "(spread)", "GB/s", "vs perftest", "vs -e", "vs dense", "copies/B",
                "per B: dense");
    double dense_median = 0, dense_rate = 0, dense_copies = 0;
    for (const std::string& scenario : refits) {
      const Result r = measure(self, model, scenario, list, reps, checksum, fraction, layouts);
      if (!r.error.empty()) {
        std::printf("  %-10s failed: %s\n", scenario.c_str(), r.error.c_str());
        continue;
      }
      const double rate = static_cast<double>(r.wire) / r.median / 1e9;
      const double copies = copies_per_wire_byte(list, scenario, layouts, r.ranks);
      if (scenario == "dense") dense_median = r.median, dense_rate = rate, dense_copies = copies;
      // Per wire byte against dense, and what the copies alone would make it.
      char per_byte[48] = "-";
      if (dense_rate > 0 && scenario != "dense")
        std::snprintf(per_byte, sizeof(per_byte), "%.2f (copies %.2f)", rate / dense_rate, dense_copies / copies);
      char vs_pt[32] = "-", vs_pe[32] = "-", vs_dense[32] = "-", spread[48];
      if (pt.median > 0) std::snprintf(vs_pt, sizeof(vs_pt), "%.2f%s", rate / pt.median, in_cache ? "c" : "");
      if (pe.median > 0) std::snprintf(vs_pe, sizeof(vs_pe), "%.2f%s", rate / pe.median, in_cache ? "c" : "");
      if (dense_median > 0) std::snprintf(vs_dense, sizeof(vs_dense), "%.3f", r.median / dense_median);
      std::snprintf(spread, sizeof(spread), "(%.4f-%.4f)", r.best, r.worst);
      // What each receiver ends up holding: the whole model, its third of every tensor, or its shard.
      const Ranks& ranks = r.ranks;
      const double held = static_cast<double>(ranks.wanted) / ranks.receivers;
      const std::string how = scenario == "layouts"
                                  ? layouts
                                  : std::to_string(ranks.senders) + " -> " + std::to_string(ranks.receivers);
      std::printf("  %-10s %-12s %12.1f %14.1f %10.4f %19s %9.2f %11s %9s %10s %9.2f %19s\n", scenario.c_str(),
                  how.c_str(), static_cast<double>(r.wire) / 1048576.0, held / 1048576.0, r.median, spread,
                  rate, vs_pt, vs_pe, vs_dense, copies, per_byte);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nEvery time is the median of the timed refits with its spread (fastest-slowest); vs perftest: (wire "
      "bytes / median "
      "time) over ucx_perftest's median rate for one pair; vs dense: median time over the dense refit's "
      "median time (same "
      "tensors, same receivers, same run); copies/B: bytes copied per wire byte, counted from the pieces "
      "(the wire's own copy, sender cuts and packing, receiver copies); per B: dense: GB/s per wire byte over "
      "dense's, and (copies) that ratio were copies the only cost: dense's copies/B over this refit's\n");
  if (cached)
    std::printf(
        "c: ucx_perftest sends every message from one 16 MiB buffer, which stays in cache on this machine (a copy "
        "of one message runs over 1.25x a copy through the weights): not a memory figure, so the ratio marked c "
        "understates the transport, which moves every byte of the weights from memory\n");
  return 0;
}
