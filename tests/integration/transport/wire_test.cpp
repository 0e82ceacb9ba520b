// The pieces the UCX and NCCL transports share: the xxhash64 checksum against published test
// vectors, and the bucket layout / metadata codec against an independent recount.
#include <catch2/catch.hpp>

#include <cstring>

#include "mlpt/sdk/error.hpp"
#include "transport_support.hpp"
#include "transport_wire/weight_layout.hpp"
#include "mlpt/sdk/xxhash64.hpp"

using mlpt::sdk::xxhash64;
using namespace mlpt::transport;

TEST_CASE("xxhash64 matches the reference implementation's published values") {
  CHECK(xxhash64("", 0) == 0xEF46DB3751D8E999ull);
  CHECK(xxhash64("a", 1) == 0xD24EC4F1A98C6E5Bull);
  CHECK(xxhash64("abc", 3) == 0x44BC2CF5AD770999ull);
  const char* s = "Nobody inspects the spammish repetition";  // 39 bytes: the 4-lane path and every tail
  CHECK(xxhash64(s, std::strlen(s)) == 0xFBCEA83C8A378BF1ull);
  // One flipped bit anywhere changes it.
  std::vector<uint8_t> data(100003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  uint64_t h = xxhash64(data.data(), data.size());
  for (size_t at : {size_t(0), size_t(31), size_t(50000), data.size() - 1}) {
    data[at] ^= 1;
    CHECK(xxhash64(data.data(), data.size()) != h);
    data[at] ^= 1;
  }
}

TEST_CASE("bucket layout covers every byte once, within bucket_bytes, and round-trips as metadata") {
  auto set = transport_test::mixed_tensors(1);
  for (uint64_t bucket : {4096ull, 65536ull, 300000ull, 1ull << 20, 64ull << 20}) {
    Layout l = plan_layout(set.views.data(), set.views.size(), 9, bucket, true, "test");
    // Independent recount: mark the bytes each tensor owns, then check the buckets cover exactly those.
    std::vector<int> owner(l.total_bytes, 0), covered(l.total_bytes, 0);
    uint64_t payload = 0;
    for (size_t i = 0; i < l.tensors.size(); ++i) {
      CHECK(l.tensors[i].offset % kAlignment == 0);
      CHECK(l.tensors[i].nbytes == set.bytes[i].size());
      for (uint64_t b = 0; b < l.tensors[i].nbytes; ++b) owner[l.tensors[i].offset + b]++;
      payload += l.tensors[i].nbytes;
    }
    for (auto& b : l.buckets) {
      CHECK(b.size > 0);
      CHECK(b.size <= bucket);
      for (uint64_t k = 0; k < b.size; ++k) covered[b.offset + k]++;
    }
    for (uint64_t k = 0; k < l.total_bytes; ++k) {
      CHECK(owner[k] <= 1);
      if (owner[k]) REQUIRE(covered[k] == 1);
      CHECK(covered[k] <= 1);
    }
    CHECK(payload == 4 * 257 * 1031 + 2 * 3 * 77777 + 2 * 1001 + 1 + 4 + 4 * 91 + 2 * 600001);
    auto meta = encode_metadata(l);
    Layout d = decode_metadata(meta.data(), meta.size());
    CHECK(d.version == 9);
    CHECK(d.total_bytes == l.total_bytes);
    REQUIRE(d.tensors.size() == l.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      CHECK(d.tensors[i].name == set.names[i]);
      CHECK(d.tensors[i].shape == set.shapes[i]);
      CHECK(d.tensors[i].offset == l.tensors[i].offset);
    }
    REQUIRE(d.buckets.size() == l.buckets.size());
    // A packed bucket, once packed, holds each member's bytes at its stream offset.
    for (auto& b : l.buckets) {
      if (b.direct_tensor >= 0) continue;
      std::vector<uint8_t> staging(b.size, 0xEE);
      pack_bucket(l, b, set.views.data(), staging.data());
      for (uint32_t m = b.first_member; m < b.end_member; ++m)
        CHECK(std::memcmp(staging.data() + (l.tensors[m].offset - b.offset), set.bytes[m].data(), set.bytes[m].size()) == 0);
    }
  }
}

TEST_CASE("malformed metadata is refused with MLPT_DATA_LOSS, never read out of bounds") {
  auto set = transport_test::mixed_tensors(1);
  Layout l = plan_layout(set.views.data(), set.views.size(), 1, 65536, false, "test");
  auto meta = encode_metadata(l);
  for (size_t cut : {size_t(0), size_t(3), size_t(20), meta.size() / 2, meta.size() - 1}) {
    try {
      decode_metadata(meta.data(), cut);
      FAIL("a truncated message of " << cut << " bytes was accepted");
    } catch (const mlpt::sdk::Error& e) {
      CHECK(e.code() == MLPT_DATA_LOSS);
    }
  }
  auto bad = meta;
  uint64_t tiny = 10;  // total_bytes (after magic, format, flags, version): tensors now lie outside it
  std::memcpy(bad.data() + 16, &tiny, 8);
  try {
    decode_metadata(bad.data(), bad.size());
    FAIL("a 10-byte buffer holding megabytes of tensors was accepted");
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("lies outside the 10-byte buffer"));
  }
  // Bad input to the planner names the tensor.
  set.views[2].tensor.data = nullptr;
  try {
    plan_layout(set.views.data(), set.views.size(), 1, 65536, false, "ucx send");
    FAIL("NULL data accepted");
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("'model.layers.0.input_layernorm.bias' has NULL data"));
  }
}

TEST_CASE("metadata of shard boxes (format 2) round-trips, stays format 1 without them, and a box outside its tensor is refused") {
  auto set = transport_test::mixed_tensors(1);
  Layout l = plan_layout(set.views.data(), set.views.size(), 5, 65536, false, "test");
  auto plain = encode_metadata(l);
  uint16_t format = 0;
  std::memcpy(&format, plain.data() + 4, 2);
  CHECK(format == 1);  // nothing needs boxes: a receiver of format 1 still reads it
  // The first tensor (up_proj [257, 1031]) as rows [100, 357) of a [400, 1031] tensor.
  l.request = 42;
  l.tensors[0].global_shape = {400, 1031};
  l.tensors[0].box_offset = {100, 0};
  auto boxed = encode_metadata(l);
  std::memcpy(&format, boxed.data() + 4, 2);
  CHECK(format == 2);
  Layout d = decode_metadata(boxed.data(), boxed.size());
  CHECK(d.request == 42);
  CHECK(d.tensors[0].global_shape == std::vector<int64_t>{400, 1031});
  CHECK(d.tensors[0].box_offset == std::vector<int64_t>{100, 0});
  CHECK(d.tensors[1].global_shape.empty());  // whole
  // Rows [150, 407) do not lie in 400 rows.
  l.tensors[0].box_offset = {150, 0};
  auto outside = encode_metadata(l);
  try {
    decode_metadata(outside.data(), outside.size());
    FAIL("a box outside its global shape was accepted");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_DATA_LOSS);
    CHECK_THAT(e.what(), Catch::Contains("model.layers.0.mlp.up_proj.weight") && Catch::Contains("does not lie in its global shape"));
  }
}
