#include "refit_sender.hpp"

#include <chrono>
#include <cstring>

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

const std::vector<mlpt_named_tensor>& RefitSender::prepare(uint64_t version, const mlpt_named_tensor* weights,
                                                           size_t count, bool force_full) {
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
  bool full = force_full || !base_.valid() || (full_every_ > 0 && since_full_ >= full_every_) ||
              !base_.same_layout(weights, count);
  const auto [delta_s, whole_s] = predicted_seconds(stats_.dense_bytes);
  const bool quicker_whole = !full && whole_s > 0 && whole_s < delta_s;
  full = full || quicker_whole;
  message_.assign(1 + count, mlpt_named_tensor{});
  blob_sizes_.resize(1 + count);
  if (full) {
    m.kind = RefitManifest::Kind::full;
    for_each_tensor(count, [&](size_t i) {
      m.hashes[i] = sdk::xxhash64(bytes_of(weights[i].tensor), sdk::nbytes(weights[i].tensor));
    });
    for (size_t i = 0; i < count; ++i) message_[1 + i] = weights[i];
    base_.assign(version, weights, count);
    since_full_ = 1;
    stats_.full = true;
    stats_.whole_by_rates = quicker_whole;
  } else {
    m.kind = RefitManifest::Kind::delta;
    m.base_version = base_.version();
    blobs_.resize(count);
    auto& base = base_.tensors();
    std::vector<int64_t> changed(count, 0);
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
    for (size_t i = 0; i < count; ++i) {
      stats_.changed += changed[i];
      message_[1 + i] = byte_tensor(weights[i].name, blobs_[i], blob_sizes_[1 + i]);
    }
    base_.set_version(version);
    ++since_full_;
    stats_.full = false;
  }
  manifest_ = encode_manifest(m);
  message_[0] =
      byte_tensor(mlpt_string{kManifestName.data(), kManifestName.size()}, manifest_, blob_sizes_[0]);
  for (const auto& t : message_) stats_.bytes += sdk::nbytes(t.tensor);
  if (!full && stats_.dense_bytes > 0) {
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
