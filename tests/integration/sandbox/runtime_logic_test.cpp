// The runtime's pure parts: the apptainer command line (the apptainer runtime cannot run here, so
// this is its check), the bwrap command line, the binds file and the config.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "config.hpp"
#include "image_store.hpp"
#include "runtimes.hpp"
#include "seccomp_filter.hpp"

using namespace mlpt::sandbox;
using mlpt::sdk::Error;

TEST_CASE("the apptainer argv is the reference's exec line plus binds") {
  ApptainerPlan p{"/img/x.sif", "/state/1/overlay", "/testbed", "ls -la", {{"/usr/lib/python3", "/usr/lib/python3", false}},
                  {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}}, "/state/seccomp.json"};
  std::vector<std::string> expect = {"apptainer", "exec", "--userns", "--fakeroot", "--no-privs", "--security",
                                     "seccomp:/state/seccomp.json", "--containall", "--cleanenv", "--overlay", "/state/1/overlay",
                                     "--no-mount", "home,tmp,sys,hostfs,cwd", "--pid", "--net", "--network", "none", "--pwd", "/testbed",
                                     "--bind", "/usr/lib/python3:/usr/lib/python3:ro", "--env", "PATH=/usr/bin:/bin",
                                     "--env", "HOME=/root", "/img/x.sif", "/bin/sh", "-c", "ls -la"};
  CHECK(apptainer_exec_argv("apptainer", p) == expect);
  p.overlay_dir.clear();
  auto a = apptainer_exec_argv("apptainer", p);
  CHECK(std::find(a.begin(), a.end(), "--writable-tmpfs") != a.end());
  CHECK(std::find(a.begin(), a.end(), "--overlay") == a.end());
}

TEST_CASE("the bwrap argv isolates and runs /bin/sh -c in the workdir") {
  BwrapPlan p{"/s/root", {{"/usr", "/usr", false}, {"/lib64", "/lib64", true}}, {{"PATH", "/bin"}}, "/testbed", "echo hi"};
  auto a = bwrap_argv("/usr/bin/bwrap", p);
  auto has = [&](const std::string& s) { return std::find(a.begin(), a.end(), s) != a.end(); };
  for (const char* f : {"--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent", "--clearenv", "--new-session",
                        "--ro-bind", "--ro-bind-try"})
    CHECK(has(f));
  // Root inside the user namespace; the seccomp program on descriptor 4.
  auto uid = std::find(a.begin(), a.end(), "--uid");
  REQUIRE(uid != a.end());
  CHECK(*(uid + 1) == "0");
  auto sec = std::find(a.begin(), a.end(), "--seccomp");
  REQUIRE(sec != a.end());
  CHECK(*(sec + 1) == "4");
  p.seccomp = false;
  auto b = bwrap_argv("/usr/bin/bwrap", p);
  CHECK(std::find(b.begin(), b.end(), "--seccomp") == b.end());
  CHECK(std::vector<std::string>(a.begin(), a.begin() + 4) == std::vector<std::string>{"/usr/bin/bwrap", "--bind", "/s/root", "/"});
  CHECK(a.back() == "echo hi");
  CHECK(*(a.end() - 3) == "/bin/sh");
  auto cap = std::find(a.begin(), a.end(), "--cap-drop");
  REQUIRE(cap != a.end());
  CHECK(*(cap + 1) == "ALL");
}

TEST_CASE("the binds file is parsed and checked against the allowed host prefixes") {
  std::vector<std::string> allowed = {"/usr", "/lib"};
  std::vector<HostBind> b;
  std::vector<std::pair<std::string, std::string>> env;
  parse_binds(R"({"binds": ["/usr/lib/python3", {"host": "/lib", "path": "/hostlib", "optional": true}], "env": {"A": "1"}})",
              "f", allowed, b, env);
  REQUIRE(b.size() == 2);
  CHECK(b[0].host == "/usr/lib/python3");
  CHECK(b[0].path == "/usr/lib/python3");
  CHECK(b[1].path == "/hostlib");
  CHECK(b[1].optional);
  CHECK(env == std::vector<std::pair<std::string, std::string>>{{"A", "1"}});
  auto code = [&](const std::string& text) {
    std::vector<HostBind> x;
    std::vector<std::pair<std::string, std::string>> y;
    try {
      parse_binds(text, "f", allowed, x, y);
    } catch (const Error& e) {
      return e.code();
    }
    return MLPT_OK;
  };
  CHECK(code(R"({"binds": ["/etc/shadow"]})") == MLPT_PERMISSION_DENIED);
  CHECK(code(R"({"binds": ["/usrx"]})") == MLPT_PERMISSION_DENIED);
  CHECK(code(R"({"binds": ["usr"]})") == MLPT_INVALID_ARGUMENT);
  CHECK(code(R"({"binds": ["/usr/../etc"]})") == MLPT_INVALID_ARGUMENT);
  CHECK(code(R"({"bind": []})") == MLPT_INVALID_ARGUMENT);
  CHECK(code("not json") == MLPT_INVALID_ARGUMENT);
}

TEST_CASE("the config rejects unknown keys and bad values") {
  CHECK(parse_config("").runtime == "auto");
  CHECK(parse_config(R"({"runtime": "bwrap", "default_output_limit": 10})").default_output_limit == 10);
  CHECK_THROWS_WITH(parse_config(R"({"runtim": "bwrap"})"), Catch::Contains("runtim"));
  CHECK_THROWS_WITH(parse_config(R"({"runtime": "docker"})"), Catch::Contains("docker"));
  CHECK_THROWS_WITH(parse_config(R"({"state_dir": "rel"})"), Catch::Contains("absolute"));
}

TEST_CASE("shell quoting survives every byte but NUL") {
  std::string nasty = "a'b\"c $(x) `y` \\ \n;|&*?";
  std::string cmd = "printf %s " + shell_quote(nasty);
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  CHECK(out == nasty);
}

TEST_CASE("the seccomp policy denies the same calls in the BPF program and the apptainer profile") {
  const auto& denied = denied_syscalls();
  REQUIRE(denied.size() > 30);
  std::string prog = seccomp_bpf_program();
  REQUIRE(prog.size() % 8 == 0);  // struct sock_filter
  // Every denied number appears as a compare constant in the program.
  auto has_k = [&](uint32_t k) {
    for (size_t i = 0; i < prog.size(); i += 8) {
      uint32_t v;
      std::memcpy(&v, prog.data() + i + 4, 4);
      if (v == k) return true;
    }
    return false;
  };
  for (auto& d : denied) CHECK(has_k(static_cast<uint32_t>(d.nr)));
  auto profile = nlohmann::json::parse(seccomp_oci_profile());
  CHECK(profile["defaultAction"] == "SCMP_ACT_ALLOW");
  std::set<std::string> names;
  for (auto& r : profile["syscalls"])
    if (r["action"] == "SCMP_ACT_ERRNO" && !r.contains("args"))
      for (auto& n : r["names"]) names.insert(n.get<std::string>());
  for (auto& d : denied) CHECK(names.count(d.name) == 1);
  for (const char* must : {"mount", "init_module", "keyctl", "ptrace", "bpf", "perf_event_open", "reboot", "unshare"})
    CHECK(names.count(must) == 1);
}

TEST_CASE("the config refuses to run sandboxes as the host's root") {
  CHECK_THROWS_AS(parse_config(R"({"sandbox_uid": 0})"), Error);
  CHECK_THROWS_AS(parse_config(R"({"sandbox_gid": 0})"), Error);
  CHECK_THROWS_AS(parse_config(R"({"sandbox_uid": 4294967295})"), Error);
  CHECK(parse_config("").sandbox_uid == 65534);
  CHECK(parse_config(R"({"sandbox_uid": 1234})").sandbox_uid == 1234);
}
