#include "model/parallel/expert_dispatch.hpp"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {

// The first token of part `r` of `n` tokens split among `parts` as evenly as possible.
int64_t slice_begin(int64_t n, int parts, int r) { return n * r / parts; }

// The round trip of one layer's (token, slot) pairs: this rank's token slice [begin, end) of the
// rows it shares with `sharers` sends each pair to its expert's owner in `group`, the owner answers
// each row it received, and the sharers gather their slices.
class ExpertExchange {
 public:
  ExpertExchange(Communicator& group, Communicator* sharers, int64_t rows, int64_t k, int64_t per_rank,
                 const int16_t* experts)
      : group_(group),
        sharers_(sharers && sharers->size() > 1 ? sharers : nullptr),
        P_(group.size()),
        S_(sharers_ ? sharers_->size() : 1),
        rows_(rows),
        k_(k),
        per_rank_(per_rank),
        experts_(experts) {
    const int me = sharers_ ? sharers_->rank() : 0;
    begin_ = slice_begin(rows, S_, me);
    end_ = slice_begin(rows, S_, me + 1);
    std::vector<std::vector<int64_t>> to(static_cast<size_t>(P_));  // pairs t * k + i per owner
    for (int64_t pair = begin_ * k; pair < end_ * k; ++pair) to[static_cast<size_t>(experts[pair] / per_rank)].push_back(pair);
    sent_.resize(static_cast<size_t>(P_));
    received_.resize(static_cast<size_t>(P_));
    row_of_.resize(static_cast<size_t>((end_ - begin_) * k));
    int64_t row = 0;
    for (int p = 0; p < P_; ++p) {
      sent_[static_cast<size_t>(p)] = to[static_cast<size_t>(p)].size();
      for (int64_t pair : to[static_cast<size_t>(p)]) {
        order_.push_back(pair);
        row_of_[static_cast<size_t>(pair - begin_ * k)] = row++;
      }
    }
    group.exchange_counts(sent_.data(), received_.data());
    received_rows_ = static_cast<int64_t>(std::accumulate(received_.begin(), received_.end(), size_t{0}));
  }

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int64_t received_rows() const { return received_rows_; }
  int64_t local_expert(int64_t pair) const { return experts_[pair] % per_rank_; }

  // Sends `width` floats per pair (fill(pair, row) writes them) to the owners; returns what this
  // rank received, `width` per row.
  template <class Fill>
  std::vector<float> dispatch(int64_t width, Fill fill) const {
    std::vector<float> send(order_.size() * static_cast<size_t>(width)), recv(static_cast<size_t>(received_rows_ * width));
    for (size_t j = 0; j < order_.size(); ++j) fill(order_[j], send.data() + j * static_cast<size_t>(width));
    group_.all_to_all_v(send.data(), scaled(sent_, width).data(), recv.data(), scaled(received_, width).data());
    return recv;
  }

  // Sends back `width` floats per received row (in the order received); row_of(pair) finds each
  // pair's answer in the result.
  std::vector<float> answer(const std::vector<float>& rows, int64_t width) const {
    std::vector<float> back(order_.size() * static_cast<size_t>(width));
    group_.all_to_all_v(rows.data(), scaled(received_, width).data(), back.data(), scaled(sent_, width).data());
    return back;
  }
  int64_t row_of(int64_t pair) const { return row_of_[static_cast<size_t>(pair - begin_ * k_)]; }

  // The pairs of token t with their experts in increasing id (the order cpu::experts_* sum them).
  std::vector<int64_t> pairs_in_expert_order(int64_t t) const {
    std::vector<int64_t> order(static_cast<size_t>(k_));
    std::iota(order.begin(), order.end(), t * k_);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return experts_[a] < experts_[b]; });
    return order;
  }

  // full[rows, width] = every sharer's slice (rows [begin, end) of `width` floats each).
  void gather(const std::vector<float>& slice, int64_t width, float* full) const {
    if (!sharers_) {
      std::copy(slice.begin(), slice.end(), full);
      return;
    }
    std::vector<size_t> counts(static_cast<size_t>(S_));
    for (int p = 0; p < S_; ++p)
      counts[static_cast<size_t>(p)] =
          static_cast<size_t>((slice_begin(rows_, S_, p + 1) - slice_begin(rows_, S_, p)) * width);
    sharers_->all_gather_v(slice.data(), slice.size(), full, counts.data());
  }

 private:
  static std::vector<size_t> scaled(const std::vector<size_t>& rows, int64_t width) {
    std::vector<size_t> out(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * static_cast<size_t>(width);
    return out;
  }

  Communicator& group_;
  Communicator* sharers_;  // NULL: this rank's rows are its own
  int P_, S_;
  int64_t rows_, k_, per_rank_, begin_ = 0, end_ = 0, received_rows_ = 0;
  const int16_t* experts_;
  std::vector<size_t> sent_, received_;  // rows per rank
  std::vector<int64_t> order_;           // the pairs in send order
  std::vector<int64_t> row_of_;          // pair - begin * k -> its row in send order
};

void check_split(const cpu::MoeShape& shape, const Communicator& group) {
  if (shape.num_experts % group.size() != 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, std::to_string(shape.num_experts) + " experts do not split over " +
                                                std::to_string(group.size()) + " expert-parallel ranks");
}

}  // namespace

void dispatch_experts_forward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                              int64_t rows, const float* x, const int16_t* experts, const float* weights,
                              const LocalExperts& local, float* y) {
  check_split(shape, group);
  const int64_t H = shape.hidden, per_rank = shape.num_experts / group.size();
  const ExpertExchange ex(group, sharers, rows, shape.top_k, per_rank, experts);
  // Each pair travels as [x row, local expert id]; the owner answers E(x) (weight 1: the token's rank weighs).
  const std::vector<float> in = ex.dispatch(H + 1, [&](int64_t pair, float* row) {
    std::copy_n(x + pair / shape.top_k * H, H, row);
    row[H] = static_cast<float>(ex.local_expert(pair));
  });
  const int64_t n = ex.received_rows();
  std::vector<float> xs(static_cast<size_t>(n * H)), outs(static_cast<size_t>(n * H), 0.0f);
  std::vector<int16_t> ids(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(in.begin() + j * (H + 1), H, xs.begin() + j * H);
    ids[static_cast<size_t>(j)] = static_cast<int16_t>(in[static_cast<size_t>(j * (H + 1) + H)]);
  }
  if (n > 0) local.forward(n, xs.data(), ids.data(), outs.data());
  const std::vector<float> back = ex.answer(outs, H);

  std::vector<float> slice(y + ex.begin() * H, y + ex.end() * H);
  for (int64_t t = ex.begin(); t < ex.end(); ++t) {
    float* out = slice.data() + (t - ex.begin()) * H;
    for (int64_t pair : ex.pairs_in_expert_order(t)) {
      const float w = weights[pair];
      const float* e = back.data() + ex.row_of(pair) * H;
      for (int64_t c = 0; c < H; ++c) out[c] += w * e[c];
    }
  }
  ex.gather(slice, H, y);
}

void dispatch_experts_backward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                               int64_t rows, const float* x, const int16_t* experts, const float* weights,
                               const float* dy, const LocalExperts& local, float* dx, float* dweights) {
  check_split(shape, group);
  const int64_t H = shape.hidden, k = shape.top_k, per_rank = shape.num_experts / group.size();
  const ExpertExchange ex(group, sharers, rows, k, per_rank, experts);
  // Each pair travels as [x row, dy row, weight, local expert id]; the owner answers [dx row, dweight]
  // and keeps its experts' weight gradients.
  const int64_t width = 2 * H + 2;
  const std::vector<float> in = ex.dispatch(width, [&](int64_t pair, float* row) {
    std::copy_n(x + pair / k * H, H, row);
    std::copy_n(dy + pair / k * H, H, row + H);
    row[2 * H] = weights[pair];
    row[2 * H + 1] = static_cast<float>(ex.local_expert(pair));
  });
  const int64_t n = ex.received_rows();
  std::vector<float> xs(static_cast<size_t>(n * H)), dys(static_cast<size_t>(n * H)), ws(static_cast<size_t>(n));
  std::vector<float> dxs(static_cast<size_t>(n * H), 0.0f), dws(static_cast<size_t>(n));
  std::vector<int16_t> ids(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const float* row = in.data() + j * width;
    std::copy_n(row, H, xs.begin() + j * H);
    std::copy_n(row + H, H, dys.begin() + j * H);
    ws[static_cast<size_t>(j)] = row[2 * H];
    ids[static_cast<size_t>(j)] = static_cast<int16_t>(row[2 * H + 1]);
  }
  if (n > 0) local.backward(n, xs.data(), dys.data(), ws.data(), ids.data(), dxs.data(), dws.data());
  std::vector<float> answers(static_cast<size_t>(n * (H + 1)));
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(dxs.begin() + j * H, H, answers.begin() + j * (H + 1));
    answers[static_cast<size_t>(j * (H + 1) + H)] = dws[static_cast<size_t>(j)];
  }
  const std::vector<float> back = ex.answer(answers, H + 1);

  std::vector<float> dx_slice(dx + ex.begin() * H, dx + ex.end() * H), dw_slice(static_cast<size_t>((ex.end() - ex.begin()) * k));
  for (int64_t t = ex.begin(); t < ex.end(); ++t) {
    float* out = dx_slice.data() + (t - ex.begin()) * H;
    for (int64_t pair : ex.pairs_in_expert_order(t)) {
      const float* a = back.data() + ex.row_of(pair) * (H + 1);
      for (int64_t c = 0; c < H; ++c) out[c] += a[c];
      dw_slice[static_cast<size_t>(pair - ex.begin() * k)] = a[H];
    }
  }
  ex.gather(dx_slice, H, dx);
  ex.gather(dw_slice, k, dweights);
}

namespace {

// This rank's block of experts on the CPU backend (weights [E/P, ...] of `shape`'s FFN width).
LocalExperts cpu_local_experts(const cpu::MoeShape& shape, int64_t per_rank, const float* gate_up, const float* down,
                               float* dgate_up, float* ddown) {
  const cpu::MoeShape one{shape.hidden, per_rank, 1, shape.intermediate, shape.norm_topk_prob};
  LocalExperts local;
  local.forward = [=](int64_t n, const float* x, const int16_t* ids, float* out) {
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    cpu::experts_forward(one, n, x, ids, ones.data(), gate_up, down, out);
  };
  local.backward = [=](int64_t n, const float* x, const float* dy, const float* w, const int16_t* ids, float* dx,
                       float* dw) { cpu::experts_backward(one, n, x, ids, w, gate_up, down, dy, dx, dw, dgate_up, ddown); };
  return local;
}

}  // namespace

template <class T>
void dispatched_experts_forward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                                int64_t rows, const T* x, const int16_t* experts, const T* weights,
                                const T* gate_up, const T* down, T* y) {
  if constexpr (std::is_same_v<T, float>)
    dispatch_experts_forward(
        group, sharers, shape, rows, x, experts, weights,
        cpu_local_experts(shape, shape.num_experts / group.size(), gate_up, down, nullptr, nullptr), y);
  else
    throw sdk::Error(MLPT_UNIMPLEMENTED, "expert parallelism computes in float32 only");
}

template <class T>
void dispatched_experts_backward(Communicator& group, Communicator* sharers, const cpu::MoeShape& shape,
                                 int64_t rows, const T* x, const int16_t* experts, const T* weights,
                                 const T* gate_up, const T* down, const T* dy, T* dx, T* dweights,
                                 T* dgate_up, T* ddown) {
  if constexpr (std::is_same_v<T, float>)
    dispatch_experts_backward(
        group, sharers, shape, rows, x, experts, weights, dy,
        cpu_local_experts(shape, shape.num_experts / group.size(), gate_up, down, dgate_up, ddown), dx,
        dweights);
  else
    throw sdk::Error(MLPT_UNIMPLEMENTED, "expert parallelism computes in float32 only");
}

#define MLPT_INSTANTIATE(T)                                                                                 \
  template void dispatched_experts_forward<T>(Communicator&, Communicator*, const cpu::MoeShape&, int64_t,  \
                                              const T*, const int16_t*, const T*, const T*, const T*, T*);  \
  template void dispatched_experts_backward<T>(Communicator&, Communicator*, const cpu::MoeShape&, int64_t, \
                                               const T*, const int16_t*, const T*, const T*, const T*,      \
                                               const T*, T*, T*, T*, T*);
MLPT_INSTANTIATE(float)
MLPT_INSTANTIATE(double)
#undef MLPT_INSTANTIATE

}  // namespace mlpt::ref
