#include "refit_sender.hpp"

#include <chrono>
#include <cstring>

#include "delta_kernels.hpp"
#include "host_tensor.hpp"
#include "mlpt/sdk/xxhash64.hpp"
#include "parallel_tensors.hpp"
#include "refit_manifest.hpp"
#include "sparse_delta.hpp"

namespace mlpt::sparse_refit {
namespace {

mlpt_named_tensor byte_tensor(mlpt_string name, std::vector<std::byte>& bytes, int64_t& size) {
  size = static_cast<int64_t>(bytes.size());
  mlpt_named_tensor t{};
  t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
  t.name = name;
  t.tensor.data = bytes.data();
  t.tensor.device = DLDevice{kDLCPU, 0};
  t.tensor.ndim = 1;
  t.tensor.dtype = DLDataType{kDLUInt, 8, 1};
  t.tensor.shape = &size;
  return t;
}

}  // namespace

bool RefitSender::list_fits(const sdk::ChangedElementsExtension* changes, const mlpt_named_tensor* weights,
                            size_t count) const {
  if (!changes || prepared_ == 0 || changes->since_version != prepared_ || changes->num_tensors != count ||
      !changes->masks)
    return false;
  // A list counts elements at the dtype's width: usable where the sender compares at that width too.
  for (size_t i = 0; i < count; ++i) {
    const DLDataType dtype = weights[i].tensor.dtype;
    if (!changes->masks[i] || static_cast<size_t>(compare_width(dtype)) != sdk::element_bytes(dtype))
      return false;
  }
  return true;
}

void RefitSender::check_list(const sdk::ChangedElementsExtension& changes, const mlpt_named_tensor* weights,
                             size_t count, uint64_t version) {
  auto& base = base_.tensors();
  std::vector<int64_t> missed(count, -1);  // the first changed element left unmarked, per tensor
  for_each_tensor(count, [&](size_t i) {
    const DLTensor& t = weights[i].tensor;
    const int width = compare_width(t);
    const int64_t n = static_cast<int64_t>(sdk::nbytes(t)) / width;
    std::vector<uint64_t> exact(sdk::changed_mask_words(n));
    diff_mask(best_simd_path(), base[i].bytes.data(), bytes_of(t), n, width, exact.data());
    for (size_t w = 0; w < exact.size() && missed[i] < 0; ++w)
      if (const uint64_t left = exact[w] & ~changes.masks[i][w])
        missed[i] = static_cast<int64_t>(w * 64) + __builtin_ctzll(left);
  });
  for (size_t i = 0; i < count; ++i)
    if (missed[i] >= 0)
      throw sdk::Error(
          MLPT_FAILED_PRECONDITION,
          "sparse: the trainer's change list for version " + std::to_string(version) + " leaves element " +
              std::to_string(missed[i]) + " of '" + std::string(weights[i].name.data, weights[i].name.size) +
              "' unmarked, but it changed since version " + std::to_string(changes.since_version) +
              " (check_change_lists; a list must mark every change: mlpt/sdk/changed_elements.hpp)");
}

const std::vector<mlpt_named_tensor>& RefitSender::prepare(uint64_t version, const mlpt_named_tensor* weights,
                                                           size_t count, bool force_full,
                                                           const sdk::ChangedElementsExtension* changes) {
  RefitManifest m;
  m.version = version;
  m.hashes.resize(count);
  stats_ = VersionStats{};
  for (size_t i = 0; i < count; ++i) {
    const DLTensor& t = weights[i].tensor;
    require_host_compact(t, "weight '" + std::string(weights[i].name.data, weights[i].name.size) + "'");
    stats_.dense_bytes += sdk::nbytes(t);
    stats_.numel += static_cast<int64_t>(sdk::nbytes(t)) / compare_width(t);  // elements as compared
  }
  const auto started = std::chrono::steady_clock::now();
  trainer_lists_ = trainer_lists_ || changes != nullptr;
  bool full = force_full || prepared_ == 0 || (full_every_ > 0 && since_full_ >= full_every_) ||
              !base_.same_layout(weights, count);
  const bool marked = !full && list_fits(changes, weights, count) && (!check_lists_ || base_.valid());
  full = full || (!marked && !base_.valid());  // nothing to compare against: the last version went marked
  if (marked && check_lists_) check_list(*changes, weights, count, version);
  const auto [delta_s, whole_s] = predicted_seconds(stats_.dense_bytes);
  const bool quicker_whole = !full && !marked && whole_s > 0 && whole_s < delta_s;
  full = full || quicker_whole;
  message_.assign(1 + count, mlpt_named_tensor{});
  blob_sizes_.resize(1 + count);
  std::vector<int64_t> changed(count, 0);
  if (full) {
    m.kind = RefitManifest::Kind::full;
    for_each_tensor(count, [&](size_t i) {
      m.hashes[i] = sdk::xxhash64(bytes_of(weights[i].tensor), sdk::nbytes(weights[i].tensor));
    });
    for (size_t i = 0; i < count; ++i) message_[1 + i] = weights[i];
    // A trainer that gives change lists needs no copy to compare against (only its layout is kept).
    base_.assign(version, weights, count, /*values=*/check_lists_ || !trainer_lists_);
    since_full_ = 1;
    stats_.full = true;
    stats_.whole_by_rates = quicker_whole;
  } else if (marked) {
    m.kind = RefitManifest::Kind::marked;
    m.base_version = prepared_;
    blobs_.resize(count);
    for_each_tensor(count, [&](size_t i) {
      const DLTensor& t = weights[i].tensor;
      const int width = compare_width(t);
      blobs_[i].clear();
      changed[i] = encode_marked(changes->masks[i], bytes_of(t), static_cast<int64_t>(sdk::nbytes(t)) / width,
                                 width, blobs_[i], best_simd_path())
                       .changed;
      m.hashes[i] = sdk::xxhash64(blobs_[i].data(), blobs_[i].size());
    });
    if (check_lists_)
      base_.assign(version, weights, count);  // what the next list is checked against
    else
      base_.drop_values();  // not brought up to date: a version without a list goes whole
    ++since_full_;
    stats_.full = false;
    stats_.marked = true;
  } else {
    m.kind = RefitManifest::Kind::delta;
    m.base_version = base_.version();
    blobs_.resize(count);
    auto& base = base_.tensors();
    // Each tensor's delta, its checksum and the copy brought up to date in the same pass (only
    // changed elements written).
    for_each_tensor(count, [&](size_t i) {
      const DLTensor& t = weights[i].tensor;
      const int width = compare_width(t);
      const int64_t n = static_cast<int64_t>(sdk::nbytes(t)) / width;
      blobs_[i].clear();
      changed[i] = encode_delta_and_update(base[i].bytes.data(), bytes_of(t), n, width, blobs_[i],
                                           best_simd_path(), &m.hashes[i])
                       .changed;
    });
    base_.set_version(version);
    ++since_full_;
    stats_.full = false;
  }
  if (!full)
    for (size_t i = 0; i < count; ++i) {
      stats_.changed += changed[i];
      message_[1 + i] = byte_tensor(weights[i].name, blobs_[i], blob_sizes_[1 + i]);
    }
  prepared_ = version;
  manifest_ = encode_manifest(m);
  message_[0] =
      byte_tensor(mlpt_string{kManifestName.data(), kManifestName.size()}, manifest_, blob_sizes_[0]);
  for (const auto& t : message_) stats_.bytes += sdk::nbytes(t.tensor);
  if (!full && !marked && stats_.dense_bytes > 0) {  // the rates of a comparing delta
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (took > 0) encode_bytes_per_s_ = static_cast<double>(stats_.dense_bytes) / took;
    delta_fraction_ = static_cast<double>(stats_.bytes) / static_cast<double>(stats_.dense_bytes);
  }
  return message_;
}

void RefitSender::observe_send(uint64_t bytes, double seconds) {
  if (bytes > 0 && seconds > 0) wire_bytes_per_s_ = static_cast<double>(bytes) / seconds;
}

// A delta costs its encoding, its bytes on the wire and its apply at the receiver (taken to run at
// the encoder's rate: both pass over the whole model once and hash it); whole, the dense bytes on
// the wire. Unknown rates predict nothing, and the delta is sent.
std::pair<double, double> RefitSender::predicted_seconds(uint64_t dense_bytes) const {
  if (wire_bytes_per_s_ <= 0 || encode_bytes_per_s_ <= 0) return {0, 0};
  const double dense = static_cast<double>(dense_bytes);
  return {2 * dense / encode_bytes_per_s_ + dense * delta_fraction_ / wire_bytes_per_s_,
          dense / wire_bytes_per_s_};
}

}  // namespace mlpt::sparse_refit
