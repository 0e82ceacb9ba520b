#include "refit_receiver.hpp"

#include <string>

#include "host_tensor.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/xxhash64.hpp"
#include "parallel_tensors.hpp"
#include "refit_manifest.hpp"
#include "sparse_delta.hpp"

namespace mlpt::sparse_refit {
namespace {

std::string name_of(const mlpt_named_tensor& t) {
  return std::string(t.name.data, t.name.size);
}

const std::byte* byte_message(const mlpt_named_tensor& t, const std::string& what, size_t& size) {
  require_host_compact(t.tensor, what);
  if (t.tensor.dtype.code != kDLUInt || t.tensor.dtype.bits != 8 || t.tensor.dtype.lanes != 1 ||
      t.tensor.ndim != 1)
    throw sdk::Error(MLPT_DATA_LOSS, what + " is not a 1-D uint8 tensor");
  size = sdk::nbytes(t.tensor);
  return bytes_of(t.tensor);
}

}  // namespace

const std::vector<mlpt_named_tensor>& RefitReceiver::apply(uint64_t version, const mlpt_named_tensor* message,
                                                           size_t count) {
  try {
    rebuild(version, message, count);
  } catch (...) {
    copy_.clear();  // whatever was half applied is not the sender's: only a full message is accepted next
    throw;
  }
  return copy_.views();
}

void RefitReceiver::rebuild(uint64_t version, const mlpt_named_tensor* message, size_t count) {
  const std::string where = "sparse refit of version " + std::to_string(version);
  if (count == 0 || name_of(message[0]) != kManifestName)
    throw sdk::Error(MLPT_DATA_LOSS,
                     where + ": the message does not start with '" + std::string(kManifestName) +
                         "' (was it sent by a dense refit? both ends need [run] refit = \"sparse\")");
  size_t size = 0;
  const std::byte* data = byte_message(message[0], where + ": the manifest", size);
  const RefitManifest m = decode_manifest(data, size);
  if (m.version != version)
    throw sdk::Error(MLPT_DATA_LOSS, where + ": the manifest says version " + std::to_string(m.version));
  if (m.hashes.size() != count - 1)
    throw sdk::Error(MLPT_DATA_LOSS, where + ": the manifest has " + std::to_string(m.hashes.size()) +
                                         " checksums for " + std::to_string(count - 1) + " tensors");
  if (m.kind == RefitManifest::Kind::full) {
    copy_.assign(version, message + 1, count - 1);
  } else {
    if (!copy_.valid())
      throw sdk::Error(MLPT_FAILED_PRECONDITION,
                       where + " is a delta against version " + std::to_string(m.base_version) +
                           ", but this receiver holds no weights (a full refit must come first)");
    if (m.base_version != copy_.version())
      throw sdk::Error(MLPT_FAILED_PRECONDITION,
                       where + " is a delta against version " + std::to_string(m.base_version) +
                           ", but this receiver holds version " + std::to_string(copy_.version()));
    auto& held = copy_.tensors();
    if (held.size() != count - 1)
      throw sdk::Error(MLPT_DATA_LOSS, where + ": " + std::to_string(count - 1) + " deltas for " +
                                           std::to_string(held.size()) + " tensors");
    for (size_t i = 0; i < held.size(); ++i) {
      const std::string name = name_of(message[1 + i]);
      if (name != held[i].name)
        throw sdk::Error(MLPT_DATA_LOSS, where + ": delta " + std::to_string(i) + " is for '" + name +
                                             "', the tensor there is '" + held[i].name + "'");
      byte_message(message[1 + i], where + ": the delta of '" + name + "'", size);
    }
    if (m.kind == RefitManifest::Kind::marked) {  // each delta checked as sent, before any is applied
      std::vector<uint64_t> sums(held.size());
      for_each_tensor(held.size(), [&](size_t i) {
        size_t bytes = 0;
        const std::byte* delta =
            byte_message(message[1 + i], where + ": the delta of '" + held[i].name + "'", bytes);
        sums[i] = sdk::xxhash64(delta, bytes);
      });
      for (size_t i = 0; i < held.size(); ++i)
        if (sums[i] != m.hashes[i])
          throw sdk::Error(MLPT_DATA_LOSS, where + ": the delta of '" + held[i].name +
                                               "' differs from the one sent (checksum " +
                                               std::to_string(sums[i]) + ", expected " +
                                               std::to_string(m.hashes[i]) + ")");
    }
    for_each_tensor(held.size(), [&](size_t i) {
      const std::string name = held[i].name;
      size_t bytes = 0;
      const std::byte* delta = byte_message(message[1 + i], where + ": the delta of '" + name + "'", bytes);
      const int width = compare_width(held[i].dtype);
      apply_delta(delta, bytes, held[i].bytes.data(), static_cast<int64_t>(held[i].bytes.size()) / width,
                  width, name);
    });
    copy_.set_version(version);
    if (m.kind == RefitManifest::Kind::marked) return;
  }
  auto& held = copy_.tensors();
  std::vector<uint64_t> hashes(held.size());
  for_each_tensor(held.size(),
                  [&](size_t i) { hashes[i] = sdk::xxhash64(held[i].bytes.data(), held[i].bytes.size()); });
  for (size_t i = 0; i < held.size(); ++i) {
    const uint64_t h = hashes[i];
    if (h != m.hashes[i])
      throw sdk::Error(MLPT_DATA_LOSS, where + ": '" + held[i].name +
                                           "' as rebuilt here differs from the sender's (checksum " +
                                           std::to_string(h) + ", expected " + std::to_string(m.hashes[i]) +
                                           "): the receiver's copy diverged; the next refit must be full");
  }
}

}  // namespace mlpt::sparse_refit
