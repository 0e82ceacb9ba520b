// The SDK's settings reader, the one every bundled plugin reads its config_json with: defaults,
// typed values, bounds, nested tables, and errors that name the full key (unknown keys included).
#include <catch2/catch.hpp>

#include "mlpt/sdk/settings.hpp"

using mlpt::sdk::Settings;

namespace {

// The message of the error `read` throws, "" when it throws none.
template <class Read>
std::string error_of(Read&& read) {
  try {
    read();
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("settings: defaults when absent, typed values when present") {
  Settings s(R"({"threads": 4, "lr": 0.5, "name": "x", "on": true, "tags": ["a", "b"], "opt": {"eps": 1e-8}})", "trainer t");
  CHECK(s.integer_or("threads", 1, 1) == 4);
  CHECK(s.integer_or("absent", 7) == 7);
  CHECK(s.number_or("lr", 1.0, 0.0, 1.0) == 0.5);
  CHECK(s.string("name") == "x");
  CHECK(s.boolean_or("on", false));
  CHECK(s.strings_or("tags", {}) == std::vector<std::string>{"a", "b"});
  Settings opt = s.object("opt");
  CHECK(opt.number_or("eps", 0.0) == 1e-8);
  CHECK(error_of([&] { opt.reject_unknown(); }).empty());
  CHECK(error_of([&] { s.reject_unknown(); }).empty());
  CHECK(error_of([] { Settings("", "reward r").reject_unknown(); }).empty());  // empty text = no settings
}

TEST_CASE("settings: every mistake names the component and the full key") {
  CHECK_THAT(error_of([] { Settings(R"({"thread": 2})", "engine e").reject_unknown(); }),
             Catch::Contains("engine e settings: unknown key 'thread'"));
  CHECK_THAT(error_of([] {
               Settings s(R"({"threads": 2, "opt": {"learning_rate": 1}})", "trainer t");
               s.integer_or("threads", 1);
               Settings opt = s.object("opt");
               opt.number_or("lr", 0);
               opt.reject_unknown();
             }),
             Catch::Contains("unknown key 'opt.learning_rate' (known: lr)"));
  CHECK_THAT(error_of([] { Settings(R"({"threads": "2"})", "t").integer_or("threads", 1); }),
             Catch::Contains("t settings: threads: expected an integer, got \"2\""));
  CHECK_THAT(error_of([] { Settings(R"({"threads": 0})", "t").integer_or("threads", 1, 1); }),
             Catch::Contains("threads: must be at least 1, got 0"));
  CHECK_THAT(error_of([] { Settings(R"({"lr": 2})", "t").number_or("lr", 1, 0, 1); }), Catch::Contains("lr: must be in [0.0, 1.0], got 2.0"));
  CHECK_THAT(error_of([] { Settings(R"({"runtime": "docker"})", "s").choice_or("runtime", "auto", {"auto", "bwrap"}); }),
             Catch::Contains("runtime: expected one of \"auto\", \"bwrap\", got \"docker\""));
  CHECK_THAT(error_of([] { Settings("{}", "t").string("checkpoint"); }), Catch::Contains("checkpoint: missing (required)"));
  CHECK_THAT(error_of([] { Settings("[1]", "t"); }), Catch::Contains("t settings: expected a JSON object"));
  CHECK_THAT(error_of([] { Settings("{nope", "t"); }), Catch::Contains("t settings: not valid JSON"));
  CHECK_THAT(error_of([] { Settings(R"({"opt": 3})", "t").object("opt"); }), Catch::Contains("opt: expected a table"));
}
