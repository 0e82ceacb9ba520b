// The grader's side of the supervised test run (witness_record.hpp): SHA-256 and HMAC-SHA256
// against the published test vectors, the signed record split off the output (forgeries and
// injected bytes refused), and the statuses taken from the judge's verdicts in the record.
#include <catch2/catch.hpp>

#include <mlpt/sdk/sha256.hpp>

#include "witness_record.hpp"

using nlohmann::json;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

std::string signed_output(const std::string& run_output, json record, const std::string& key = kKey) {
  record["out_bytes"] = run_output.size();
  record["out_sha256"] = mlpt::sdk::sha256_hex(run_output);
  const std::string text = record.dump();
  return run_output + "\n@@MLPT_WITNESS@@ " + mlpt::sdk::hmac_sha256_hex(key, text) + " " + text + "\n";
}

json verdict(const std::string& id, const std::string& status) { return {{"t", "verdict"}, {"id", id}, {"status", status}}; }

json session(std::vector<json> verdicts, int exit) {
  json events = json::array({{{"t", "boot"}, {"hidden", {"r2e_tests/t.py"}}}});
  for (auto& v : verdicts) events.push_back(v);
  events.push_back({{"t", "finish"}, {"tests", verdicts.size()}});
  return {{"nonce", "n1"}, {"exit", exit}, {"events", events}, {"events_malformed", 0}, {"events_cut", false},
          {"nondumpable", true}, {"judged", true}};
}

}  // namespace

TEST_CASE("SHA-256 and HMAC-SHA256 match the FIPS 180-4 and RFC 4231 test vectors") {
  CHECK(mlpt::sdk::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(mlpt::sdk::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(mlpt::sdk::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(mlpt::sdk::sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(mlpt::sdk::hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(mlpt::sdk::hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(mlpt::sdk::hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("the supervisor's record is split off only when signed, last, and for exactly the forwarded bytes") {
  const std::string run = "=== short test summary info ===\nPASSED r2e_tests/t.py::test_a\n=== 1 passed in 0.01s ===\n";
  const json rec = session({verdict("r2e_tests/t.py::test_a", "PASSED")}, 0);
  auto good = mlpt::r2e::split_witness_record(signed_output(run, rec), kKey, "n1");
  INFO(good.why);
  REQUIRE(good.ok);
  CHECK(good.run_output == run);

  const std::string out = signed_output(run, rec);
  const std::string fake_record_line = out.substr(run.size());
  struct Case {
    const char* what;
    std::string output, key, nonce;
    const char* why_has;
  } cases[] = {
      {"no record (the run ended the supervisor)", run, kKey, "n1", "no record"},
      {"a record signed with another key", signed_output(run, rec, "guessed-key"), kKey, "n1", "signature"},
      {"a record from another grading", out, kKey, "n2", "another grading"},
      {"bytes written after the record", out + "PASSED extra\n", kKey, "n1", "follow"},
      {"bytes injected into the output beside the supervisor", "injected\n" + out, kKey, "n1", "did not forward"},
      {"forwarded bytes replaced (same length)", "X" + out.substr(1), kKey, "n1", "differs"},
      {"the record's JSON edited after signing", out.substr(0, out.size() - 3) + "9}\n", kKey, "n1", "signature"},
      {"a second, earlier copy of the record line only", fake_record_line + run, kKey, "n1", "follow"},
  };
  for (const auto& c : cases) {
    auto r = mlpt::r2e::split_witness_record(c.output, c.key, c.nonce);
    INFO(c.what << ": " << r.why);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.why, Catch::Contains(c.why_has));
  }
}

TEST_CASE("the statuses are the judge's verdicts, only from a complete record without refusals") {
  const json verdicts = json::array({verdict("r2e_tests/t.py::test_a", "PASSED"), verdict("r2e_tests/t.py::TestK::test_b[1]", "FAILED"),
                                     verdict("r2e_tests/t.py", "ERROR")});
  auto v = mlpt::r2e::judged_statuses(session(verdicts, 1), 1);
  INFO(v.why);
  CHECK(v.agrees);
  // Names as pytest's summary gives them to R2E-Gym's parser: "::" after the file as ".", a file
  // that did not collect as "".
  CHECK(v.statuses == std::map<std::string, std::string>{{"test_a", "PASSED"}, {"TestK.test_b[1]", "FAILED"}, {"", "ERROR"}});

  auto with = [&](const std::function<void(json&)>& change) {
    json r = session(verdicts, 1);
    change(r);
    return r;
  };
  struct Case {
    const char* what;
    json record;
    int exit_code;
    const char* why_has;
  } cases[] = {
      {"the judge never connected (an interpreter the shims did not start)", with([](json& r) { r["judged"] = false; }), 1,
       "never connected"},
      {"the judge ended inside the run (no finish)", with([](json& r) { r["events"].erase(r["events"].size() - 1); }), 1,
       "did not finish"},
      {"the judge never started", with([](json& r) { r["events"].erase(0); }), 1, "did not finish"},
      {"lines on the judge's socket that are not its events", with([](json& r) { r["events_malformed"] = 2; }), 1, "malformed"},
      {"a refused tampering in a child", with([](json& r) {
         r["events"].push_back({{"t", "violation"}, {"what", "read r2e_tests/t.py"}, {"at", "pkg/x.py:3"}, {"child", "collection"}});
       }),
       1, "refused: read r2e_tests/t.py"},
      {"a test the judge could not trust", with([](json& r) {
         r["events"].push_back({{"t", "untrusted"}, {"id", "r2e_tests/t.py::test_c"}, {"why", "the child exited 0 on a FAILED test"}});
       }),
       1, "r2e_tests/t.py::test_c: the child exited 0"},
      {"the process's exit status is not the one the supervisor saw", session(verdicts, 1), 0, "exit status"},
  };
  for (const auto& c : cases) {
    auto r = mlpt::r2e::judged_statuses(c.record, c.exit_code);
    INFO(c.what << ": " << r.why);
    CHECK_FALSE(r.agrees);
    CHECK_THAT(r.why, Catch::Contains(c.why_has));
  }
  // Suspects are passed on (the hardened mode scores a flagged run 0) but do not make it untrusted.
  json rec = session(verdicts, 1);
  rec["events"].push_back({{"t", "suspect"}, {"what", "sys._getframe"}, {"at", "pkg/x.py:9"}, {"child", "r2e_tests/t.py::test_a"}});
  auto s = mlpt::r2e::judged_statuses(rec, 1);
  CHECK(s.agrees);
  REQUIRE(s.suspects.size() == 1);
  CHECK(s.suspects[0]["child"] == "r2e_tests/t.py::test_a");
}
