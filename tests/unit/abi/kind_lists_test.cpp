// Each kind's list (core/plugin/kinds/) against its header: every function of the table and every
// field of the capability record, in order, with the ABI minor it arrived in (read from the frozen
// snapshots of 1.0 and 1.1), a conformance check for every capability, and the promises the header
// marks `[checked: id]` exactly those the list says the suite checks. A field added to a header
// without a list entry and a check fails here.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/config/component_kinds.hpp"
#include "core/plugin/describe.hpp"
#include "core/plugin/kinds/kind.hpp"
#include "core/plugin/plugin.hpp"
#include "header_structs.hpp"
#include "mlpt/transport.h"

namespace fs = std::filesystem;
using mlpt::plugin::KindSpec;

namespace {

const fs::path kAbi = fs::path(MLPT_SOURCE_DIR) / "abi";

// The first minor whose header declares `field` in `type`: 0 and 1 from the snapshots, else the current.
uint32_t first_minor(const KindSpec& kind, const std::string& type, const std::string& field) {
  const std::pair<uint32_t, const char*> frozen[] = {{0, "1.0"}, {1, "1.1"}};
  for (const auto& [minor, dir] : frozen) {
    const auto h = abi_test::parse_header(kAbi / "snapshots" / dir / "mlpt" / kind.header);
    if (h.structs.count(type))
      for (const auto& f : h.structs.at(type))
        if (f.name == field) return minor;
  }
  return MLPT_ABI_VERSION_MINOR;
}

bool is_function(const abi_test::Field& f) {
  return f.type.find("( * )") != std::string::npos;
}

// What differs between `header` (the kind's header as parsed) and the kind's list; empty when none.
std::vector<std::string> list_problems(const KindSpec& kind, const abi_test::Header& header) {
  std::vector<std::string> problems;
  const std::string where = std::string(mlpt::config::kind_name(kind.kind)) + " (" + kind.header + ")";
  std::vector<std::string> functions, capabilities;
  for (const auto& f : header.structs.at(kind.api_type))
    if (is_function(f)) functions.push_back(f.name);
  for (const auto& f : header.structs.at(kind.capabilities_type))
    if (f.name != "struct_size") capabilities.push_back(f.name);
  std::vector<std::string> listed_functions, listed_capabilities;
  for (const auto& f : kind.functions) listed_functions.push_back(f.name);
  for (const auto& c : kind.capabilities) listed_capabilities.push_back(c.name);
  auto compare = [&](const char* what, const std::vector<std::string>& in_header,
                     const std::vector<std::string>& listed) {
    for (size_t i = 0; i < std::max(in_header.size(), listed.size()); ++i) {
      const std::string h = i < in_header.size() ? in_header[i] : "(none)",
                        l = i < listed.size() ? listed[i] : "(none)";
      if (h != l)
        problems.push_back(where + ": " + what + " #" + std::to_string(i) + " is " + h + " in the header, " +
                           l + " in the list");
    }
  };
  compare("function", functions, listed_functions);
  compare("capability", capabilities, listed_capabilities);
  for (const auto& c : kind.capabilities)
    if (c.checked_by.empty())
      problems.push_back(where + ": capability " + c.name + " has no conformance check");
  const std::set<std::string> marked(header.checked.begin(), header.checked.end()),
      listed(kind.promises.begin(), kind.promises.end());
  for (const auto& id : marked)
    if (!listed.count(id))
      problems.push_back(where + ": the header marks [checked: " + id + "], the list has no such promise");
  for (const auto& id : listed)
    if (!marked.count(id))
      problems.push_back(where + ": the list names promise " + id + ", the header marks none");
  return problems;
}

abi_test::Header current_header(const KindSpec& kind) {
  return abi_test::parse_header(kAbi / "include" / "mlpt" / kind.header);
}

}  // namespace

TEST_CASE("every kind's list matches its header: functions, capabilities, checks and marked promises") {
  REQUIRE(mlpt::plugin::kind_specs().size() == 6);
  size_t capabilities = 0;
  for (const KindSpec* kind : mlpt::plugin::kind_specs()) {
    const auto problems = list_problems(*kind, current_header(*kind));
    for (const auto& p : problems) UNSCOPED_INFO(p);
    CHECK(problems.empty());
    capabilities += kind->capabilities.size();
  }
  CHECK(capabilities == 23);  // trainer 3, engine 5, transport 6, sandbox 5, reward 2, harness 2
}

TEST_CASE("a field or a marked promise added to a header without a list entry is found") {
  const KindSpec& engine = mlpt::plugin::engine_kind();
  abi_test::Header h = current_header(engine);
  h.structs.at(engine.capabilities_type).push_back({"returns_hidden_states", "int"});
  h.checked.push_back("hidden_states_returned");
  const auto problems = list_problems(engine, h);
  REQUIRE(problems.size() == 2);
  CHECK(problems[0].find("returns_hidden_states") != std::string::npos);
  CHECK(problems[1].find("hidden_states_returned") != std::string::npos);
}

TEST_CASE("every function and capability arrived in the minor its list says, and only 1.0's are required") {
  for (const KindSpec* kind : mlpt::plugin::kind_specs()) {
    for (const auto& f : kind->functions) {
      INFO(kind->api_type << "." << f.name);
      CHECK(f.since == first_minor(*kind, kind->api_type, f.name));
      CHECK((f.offset + sizeof(void*) <= kind->min_api_size) ==
            (f.since == 0));                // the 1.0 table holds exactly the 1.0 functions
      if (f.required) CHECK(f.since == 0);  // an older plugin's table lacks a later one
    }
    for (const auto& c : kind->capabilities) {
      INFO(kind->capabilities_type << "." << c.name);
      CHECK(c.since == first_minor(*kind, kind->capabilities_type, c.name));
      CHECK((c.offset + sizeof(int32_t) <= kind->min_capabilities_size) == (c.since == 0));
    }
  }
}

TEST_CASE("mlpt plugins inspect describes every capability in the record, max_sender_ranks included") {
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(MLPT_INPROCESS_TRANSPORT, host);
  const auto c = plugin->component(MLPT_COMPONENT_TRANSPORT);
  const auto described = mlpt::plugin::describe_capabilities(c);
  const auto* caps = c.caps<mlpt_transport_capabilities>();
  INFO(described.dump());
  REQUIRE(described.size() == mlpt::plugin::transport_kind().capabilities.size());
  CHECK(described.at("zero_copy") == caps->zero_copy);
  CHECK(described.at("max_sender_ranks") == caps->max_sender_ranks);
  // A 1.0-sized record (a plugin of 1.0) has no max_sender_ranks to describe.
  mlpt_transport_capabilities old = *caps;
  old.struct_size = MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE_1_0;
  mlpt::plugin::Component older = c;
  older.capabilities = &old;
  const auto described_old = mlpt::plugin::describe_capabilities(older);
  CHECK(described_old.size() == 5);
  CHECK(!described_old.contains("max_sender_ranks"));
}
