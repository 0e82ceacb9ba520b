// The host rules of recorded decode steps (device_model/decode_graphs.hpp), tested on any machine:
// which batch bucket a step runs in, how wide its block table is, and when a recording is still
// valid.
//
// A recording bakes in the address of every buffer its work touches. Those it owns (its workspace,
// its staged inputs) never move; the others are the weights, the KV pools and the backend's scratch.
// So a recording is valid exactly while those addresses are the ones it was made with: a refit
// that writes the weights in place keeps every recording; one that reallocates them (a new
// DeviceWeights) invalidates every recording, which is made again at its bucket's next step. The
// per-step inputs (tokens, positions, block tables, KV lengths, sampling parameters and the
// sequences' GDN state and conv window pointers) are never baked: they are staged into the
// recording's own buffers before every replay.
#pragma once

#include <cstdint>
#include <vector>

namespace mlpt::ref::dev {

// The bucket sizes for batches of up to `max_batch` sequences: 1, 2, 4, ... up to the first power
// of two ≥ max_batch. Throws MLPT_INVALID_ARGUMENT unless 1 ≤ max_batch ≤ 4096.
std::vector<int64_t> decode_buckets(int64_t max_batch);

// The smallest bucket holding `sequences` (≥ 1), or 0 when none does (the step runs unrecorded).
int64_t choose_bucket(const std::vector<int64_t>& buckets, int64_t sequences);

// The block table's row length for a step whose longest sequence holds `blocks` KV blocks: the first
// power of two ≥ blocks (≥ 1), so a growing sequence re-records its bucket only log2 times.
int64_t table_width(int64_t blocks);

// What a recording depends on beyond its own buffers.
struct RecordingKey {
  std::vector<const void*> addresses;  // weights, KV pools, the backend's scratch
  int64_t table_width = 0;
  int64_t valid_vocab = 0;  // sampled over [0, valid_vocab)
  bool operator==(const RecordingKey&) const = default;
};

}  // namespace mlpt::ref::dev
