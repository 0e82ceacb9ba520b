// The paged KV cache's bookkeeping (model/kv_blocks.hpp): blocks handed out lowest first, shared
// by a sequence's copies with a count of holders, free again when the last holder lets go, and an
// exhausted pool named with its shortfall.
#include <catch2/catch.hpp>

#include "mlpt/sdk/error.hpp"
#include "model/kv_blocks.hpp"

using mlpt::ref::KvBlockLedger;

TEST_CASE("KV blocks: reserve covers the positions, copies share full blocks, the last holder frees them") {
  KvBlockLedger ledger(6, 4);
  std::vector<int32_t> a;
  ledger.reserve(a, 10);  // 3 blocks of 4 positions
  CHECK(a == std::vector<int32_t>{0, 1, 2});
  ledger.reserve(a, 12);  // still 3
  CHECK(a.size() == 3);
  CHECK(ledger.free_blocks() == 3);

  // A copy of `a` at 10 positions: its 2 full blocks shared, the partly filled third its own.
  std::vector<int32_t> b;
  ledger.share(a, 2, b);
  ledger.reserve(b, 10);
  CHECK(b == std::vector<int32_t>{0, 1, 3});
  CHECK(ledger.holders(0) == 2);
  CHECK(ledger.holders(2) == 1);
  CHECK(ledger.holders(3) == 1);
  CHECK(ledger.free_blocks() == 2);

  ledger.release(a);  // blocks 0 and 1 stay with b; 2 is free
  CHECK(a.empty());
  CHECK(ledger.holders(0) == 1);
  CHECK(ledger.holders(2) == 0);
  CHECK(ledger.free_blocks() == 3);
  ledger.release(b);
  CHECK(ledger.free_blocks() == 6);
  for (int32_t block = 0; block < 6; ++block) CHECK(ledger.holders(block) == 0);
}

TEST_CASE("KV blocks: an exhausted pool says how many blocks are missing, and keeps what was taken") {
  KvBlockLedger ledger(2, 8);
  std::vector<int32_t> a;
  try {
    ledger.reserve(a, 40);  // 5 blocks wanted, 2 exist
    FAIL("reserve beyond the pool did not throw");
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_RESOURCE_EXHAUSTED);
    CHECK_THAT(e.what(), Catch::Contains("3 more blocks of 8 tokens needed, none free of 2"));
  }
  CHECK(a.size() == 2);  // the caller's sequence holds them until it is released
  ledger.release(a);
  CHECK(ledger.free_blocks() == 2);
  std::vector<int32_t> none;
  CHECK_THROWS_WITH(ledger.share(a, 1, none), Catch::Contains("sharing 1 blocks of a sequence holding 0"));
  CHECK_THROWS_WITH(KvBlockLedger(4, 0), Catch::Contains("block size must be at least 1"));
}
