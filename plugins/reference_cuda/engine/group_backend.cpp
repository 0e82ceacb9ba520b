#include "engine/group_backend.hpp"

#include <utility>

#include "model/named_tensors.hpp"
#include "model/parallel/shard_weights.hpp"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::ref {

using sdk::Error;

// Rank 0 of a group: an id for every sequence state, and the copies and drops the other ranks have
// not been told of yet (states are copied on the scheduler thread, dropped on any).
class StateLedger {
 public:
  uint64_t fresh() {
    std::lock_guard lk(mutex_);
    return next_++;
  }
  uint64_t copy_of(uint64_t source) {
    std::lock_guard lk(mutex_);
    ops_.push_back(StateOp{next_, source});
    return next_++;
  }
  void drop(uint64_t id) {
    std::lock_guard lk(mutex_);
    ops_.push_back(StateOp{id, 0});
  }
  std::vector<StateOp> take() {
    std::lock_guard lk(mutex_);
    return std::exchange(ops_, {});
  }

 private:
  std::mutex mutex_;
  uint64_t next_ = 1;
  std::vector<StateOp> ops_;
};

namespace {

// Rank 0's state: the backend's own under the id the other ranks know their parts of it by.
class TrackedState final : public SequenceState {
 public:
  TrackedState(std::unique_ptr<SequenceState> own, std::shared_ptr<StateLedger> ledger, uint64_t id)
      : own_(std::move(own)), ledger_(std::move(ledger)), id_(id) {}
  ~TrackedState() override { ledger_->drop(id_); }
  size_t bytes() const override { return own_->bytes(); }
  std::unique_ptr<SequenceState> clone() const override {
    auto copy = own_->clone();
    return std::make_unique<TrackedState>(std::move(copy), ledger_, ledger_->copy_of(id_));
  }
  SequenceState* own() const { return own_.get(); }
  uint64_t id() const { return id_; }

 private:
  std::unique_ptr<SequenceState> own_;
  std::shared_ptr<StateLedger> ledger_;
  uint64_t id_;
};

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// What a rank's failure to do `what` becomes on every rank.
template <class F>
std::optional<EngineGroup::Refusal> refusal_of(EngineGroup& group, mlpt_error_code code, std::string refusal, F&& attempt) {
  if (refusal.empty()) {
    try {
      attempt();
    } catch (const Error& e) {
      code = e.code(), refusal = e.what();
    } catch (const std::exception& e) {
      code = MLPT_INTERNAL, refusal = e.what();
    }
  }
  return group.first_refusal(code, refusal);
}

}  // namespace

GroupBackend::GroupBackend(sdk::Settings& s) {
  tp_ = static_cast<int>(s.integer_or("tensor_parallel", 1, 1));
  ep_ = static_cast<int>(s.integer_or("expert_parallel", 1, 1));
  etp_ = static_cast<int>(s.integer_or("expert_tensor_parallel", 1, 1));
  // Tests of a failing rank: every rank reads one config, so the fault names its rank.
  fault_ = EngineTestFault{s.integer_or("test_only_fail_at_collective", 0, 0), s.integer_or("test_only_fail_rank", -1, -1)};
}

void GroupBackend::join(const mlpt_component_group* group) {
  group_ = std::make_unique<EngineGroup>(group, tp_, ep_, etp_, fault_);  // the ranks meet
}

void GroupBackend::prepare_together(const std::string& checkpoint, const std::function<void()>& prepare) {
  if (!grouped()) return prepare();
  if (auto r = refusal_of(*group_, MLPT_OK, "", prepare))
    throw Error(r->code, "engine group '" + group_->name() + "': rank " + std::to_string(r->rank) +
                             " could not load its shard of " + checkpoint + ": " + r->reason);
  ledger_ = std::make_shared<StateLedger>();
}

void GroupBackend::created(mlpt_error_code code, const std::string& refusal) {
  if (!grouped()) return EngineBackend::created(code, refusal);
  if (auto r = group_->first_refusal(code, refusal))
    throw Error(r->code, "engine group '" + group_->name() + "': rank " + std::to_string(r->rank) +
                             " could not create its engine: " + r->reason);
}

GroupBackend::~GroupBackend() {
  if (!ledger_ || group_->rank() != 0) return;  // alone, a serving rank, or a group that never came up
  try {
    std::lock_guard ch(channel_);
    GroupMessage stop;
    stop.kind = GroupMessage::Kind::stop;
    group_->send(encode(stop));
  } catch (const std::exception& e) {
    sdk::log(MLPT_LOG_ERROR, "engine group", "rank 0 could not tell the other ranks to stop: " + std::string(e.what()));
  }
}

// The shard boxes of every tensor, in layout order: what weight_shards names and loads take.
void GroupBackend::describe_shard(const ModelConfig& whole, const Weights<float>& shard) {
  whole_config_ = whole;
  shard_config_ = shard.config;
  shard_layout_ = shard.layout;
  boxes_.clear(), box_tensors_.clear(), box_shards_.clear();
  const std::vector<ShardPlacement> placements = shard_placements(whole, shard_layout_, group_->shard());
  for (size_t i = 0; i < placements.size(); ++i)
    for (const ShardBox& b : placements[i].boxes) boxes_.push_back(Box{i, b, placements[i].global_shape});
  for (const Box& b : boxes_) {  // views of boxes_, complete now
    mlpt_named_tensor t{};
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.name = sdk::borrow(shard_layout_.tensors[b.tensor].name);
    t.tensor.device = DLDevice{kDLCPU, 0};
    t.tensor.ndim = static_cast<int32_t>(b.box.extent.size());
    t.tensor.dtype = sdk::kFloat32;
    t.tensor.shape = const_cast<int64_t*>(b.box.extent.data());
    box_tensors_.push_back(t);
    box_shards_.push_back(
        mlpt_tensor_shard{MLPT_TENSOR_SHARD_STRUCT_SIZE, b.global_shape.data(), b.box.global_offset.data()});
  }
}

sdk::TensorLayout GroupBackend::weight_layout() {
  if (boxes_.empty()) return {};
  return sdk::TensorLayout{box_tensors_.data(), box_shards_.data(), box_tensors_.size()};
}

std::unique_ptr<SequenceState> GroupBackend::new_state() {
  if (!ledger_ || group_->rank() != 0) return new_shard_state();
  return std::make_unique<TrackedState>(new_shard_state(), ledger_, ledger_->fresh());
}

void GroupBackend::step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out) {
  if (!ledger_) return run_step(segments, valid, record_routing, out, [](const std::function<void()>& forward) { forward(); });
  GroupMessage m;
  std::vector<StepSegment> own = segments;
  for (StepSegment& g : own) {
    const auto* tracked = static_cast<const TrackedState*>(g.state);
    m.states.push_back(tracked->id());
    m.tokens.insert(m.tokens.end(), g.tokens.begin(), g.tokens.end());
    m.offsets.push_back(static_cast<int64_t>(m.tokens.size()));
    g.state = tracked->own();
  }
  run_step(own, valid, record_routing, out, [&](const std::function<void()>& forward) {
    std::lock_guard channel(channel_);
    try {  // the other ranks run the same forward on their shards
      m.ops = ledger_->take();
      group_->send(encode(m));
      forward();
    } catch (const std::exception& e) {
      // The other ranks may be waiting for this one in the step's collectives: they hear why.
      group_->report_failure(e.what());
      throw;
    }
  });
}

// A rank other than 0: rank 0's step on this rank's part of its states; rank 0 alone samples.
void GroupBackend::serve_step(const GroupMessage& m) {
  std::vector<StepSegment> segments;
  for (size_t s = 0; s < m.states.size(); ++s) {
    auto& state = states_[m.states[s]];
    if (!state) state = new_shard_state();  // first named: fresh
    const auto from = static_cast<size_t>(m.offsets[s]), to = static_cast<size_t>(m.offsets[s + 1]);
    segments.push_back(StepSegment{state.get(), std::span<const int32_t>(m.tokens.data() + from, to - from), nullptr, 0});
  }
  StepOutput ignored;
  run_step(segments, whole_config_.vocab_size, false, ignored, [](const std::function<void()>& forward) { forward(); });
}

// This rank's shard from what the host gave: whole tensors (sliced here) or exactly its boxes.
Weights<float> GroupBackend::import_update(const mlpt_load_weights_args& a) const {
  bool whole = true;  // shard descriptors that each cover their whole tensor say nothing more
  for (size_t n = 0; a.shards && whole && n < a.num_tensors; ++n) {
    const DLTensor& t = a.tensors[n].tensor;
    for (int d = 0; whole && d < t.ndim; ++d)
      whole = a.shards[n].offsets && a.shards[n].global_shape && a.shards[n].offsets[d] == 0 &&
              a.shards[n].global_shape[d] == t.shape[d];
  }
  if (whole) return shard_weights(import_named_tensors(whole_config_, a.tensors, a.num_tensors), group_->shard());
  Weights<float> w;
  w.config = shard_config_;
  w.layout = shard_layout_;
  for (const auto& t : w.layout.tensors) w.values.emplace_back(static_cast<size_t>(t.numel()), 0.0f);
  std::map<std::pair<std::string, std::vector<int64_t>>, size_t> which;  // (name, global offset) -> box
  for (size_t k = 0; k < boxes_.size(); ++k) which[{shard_layout_.tensors[boxes_[k].tensor].name, boxes_[k].box.global_offset}] = k;
  std::vector<bool> seen(boxes_.size(), false);
  std::vector<float> staging;
  const std::string rank = "engine group rank " + std::to_string(group_->rank());
  for (size_t n = 0; n < a.num_tensors; ++n) {
    const mlpt_named_tensor& nt = a.tensors[n];
    const mlpt_tensor_shard& sh = a.shards[n];
    if (nt.struct_size < MLPT_NAMED_TENSOR_STRUCT_SIZE || sh.struct_size < MLPT_TENSOR_SHARD_STRUCT_SIZE)
      throw Error(MLPT_INVALID_ARGUMENT, "tensor " + std::to_string(n) + ": struct_size too small");
    const std::string name = sdk::to_string(nt.name);
    const DLTensor& t = nt.tensor;
    if (t.ndim < 1 || !t.shape || !sh.global_shape || !sh.offsets)
      throw Error(MLPT_INVALID_ARGUMENT, "shard of '" + name + "': no shape, global shape or offsets");
    const std::vector<int64_t> offset(sh.offsets, sh.offsets + t.ndim), global(sh.global_shape, sh.global_shape + t.ndim),
        shape(t.shape, t.shape + t.ndim);
    const std::string what = "shard of '" + name + "' at " + shape_text(offset);
    auto it = which.find({name, offset});
    if (it == which.end()) throw Error(MLPT_INVALID_ARGUMENT, what + " is not one that " + rank + " holds (see weight_shards)");
    const Box& b = boxes_[it->second];
    if (seen[it->second]) throw Error(MLPT_INVALID_ARGUMENT, what + " is given twice");
    seen[it->second] = true;
    if (shape != b.box.extent || global != b.global_shape)
      throw Error(MLPT_INVALID_ARGUMENT, what + " has shape " + shape_text(shape) + " of " + shape_text(global) + "; " + rank +
                                             " holds " + shape_text(b.box.extent) + " of " + shape_text(b.global_shape));
    check_tensor_memory(what, t, false);
    staging.resize(static_cast<size_t>(sdk::numel(t)));
    host_tensor_to_float(t, staging.data());
    place_local_box(staging.data(), w.layout.tensors[b.tensor].shape, b.box, w.values[b.tensor].data());
  }
  for (size_t k = 0; k < boxes_.size(); ++k)
    if (!seen[k])
      throw Error(MLPT_INVALID_ARGUMENT, "shard of '" + shard_layout_.tensors[boxes_[k].tensor].name + "' at " +
                                             shape_text(boxes_[k].box.global_offset) + " is missing (" + rank + ")");
  return w;
}

// Every rank: prepares its new shard, the group agrees, and all swap or none does.
void GroupBackend::load_together(uint64_t version, const mlpt_load_weights_args* args, mlpt_error_code code,
                                 std::string refusal) {
  std::function<void()> swap;
  if (auto r = refusal_of(*group_, code, std::move(refusal), [&] { swap = prepare_weights(import_update(*args)); }))
    throw Error(r->code, "engine group '" + group_->name() + "': rank " + std::to_string(r->rank) + " refused to load version " +
                             std::to_string(version) + ": " + r->reason);
  swap();
}

void GroupBackend::load_in_group(const mlpt_load_weights_args* args, mlpt_error_code code, const std::string& refusal) {
  if (group_->rank() == 0) {
    std::lock_guard ch(channel_);
    GroupMessage m;
    m.kind = GroupMessage::Kind::load;
    m.ops = ledger_->take();
    m.version = args ? args->version : 0;  // 0: rank 0 has nothing to load (and refuses)
    group_->send(encode(m));
    load_together(m.version, args, code, refusal);
    return;
  }
  // Another rank: hand the load to the serving thread, which takes part in rank 0's.
  HostLoad load{args, code, refusal, false, std::nullopt};
  std::unique_lock lk(host_load_mutex_);
  if (stopped_serving_)
    throw Error(MLPT_UNAVAILABLE, "engine group '" + group_->name() + "': rank " + std::to_string(group_->rank()) +
                                      " no longer serves rank 0 (" + *stopped_serving_ + ")");
  if (host_loading_) throw Error(MLPT_FAILED_PRECONDITION, "another load_weights is in progress (it is not thread-safe)");
  host_loading_ = true;
  host_load_ = &load;
  host_load_changed_.notify_all();
  host_load_changed_.wait(lk, [&] { return load.done || stopped_serving_; });
  host_loading_ = false;
  if (host_load_ == &load) host_load_ = nullptr;  // never taken: the serving thread ended
  if (!load.done)
    throw Error(MLPT_UNAVAILABLE, "engine group '" + group_->name() + "': rank " + std::to_string(group_->rank()) +
                                      " stopped serving rank 0 (" + *stopped_serving_ + ")");
  if (load.failed) throw *load.failed;
}

void GroupBackend::serve_load(uint64_t version) {
  HostLoad* load = nullptr;
  {
    std::unique_lock lk(host_load_mutex_);
    host_load_changed_.wait(lk, [&] { return host_load_ != nullptr; });  // the host's load_weights of this rank
    load = std::exchange(host_load_, nullptr);  // taken once: the next load of rank 0 waits for the next call
  }
  mlpt_error_code code = load->code;
  std::string refusal = load->refusal;
  if (refusal.empty() && version != 0 && load->args->version != version) {
    code = MLPT_INVALID_ARGUMENT;
    refusal = "it was called for version " + std::to_string(load->args->version) + ", rank 0 for " + std::to_string(version);
  }
  try {
    load_together(version, load->args, code, refusal);
  } catch (const Error& e) {
    load->failed = e;
  } catch (const std::exception& e) {
    load->failed = Error(MLPT_INTERNAL, e.what());
  }
  std::lock_guard lk(host_load_mutex_);
  load->done = true;
  host_load_changed_.notify_all();
}

void GroupBackend::serve() {
  std::string ended = "rank 0 was destroyed";
  try {
    for (;;) {
      const GroupMessage m = decode(group_->receive());
      for (const StateOp& op : m.ops) {
        if (op.source == 0) {
          states_.erase(op.id);
          continue;
        }
        auto from = states_.find(op.source);
        states_[op.id] = from == states_.end() ? new_shard_state() : from->second->clone();
      }
      if (m.kind == GroupMessage::Kind::stop) break;
      if (m.kind == GroupMessage::Kind::load) {
        serve_load(m.version);
        continue;
      }
      try {
        serve_step(m);
      } catch (const std::exception& e) {
        // Rank 0 and the others may be waiting for this rank in the step's collectives: they hear
        // why, and the group serves no more (a collective may be left half done).
        group_->report_failure(e.what());
        throw;
      }
    }
  } catch (const std::exception& e) {
    ended = e.what();
    sdk::log(MLPT_LOG_ERROR, "engine group", "rank " + std::to_string(group_->rank()) + " stops serving rank 0: " + ended);
  }
  states_.clear();
  std::lock_guard lk(host_load_mutex_);
  stopped_serving_ = ended;
  host_load_changed_.notify_all();
}

}  // namespace mlpt::ref
