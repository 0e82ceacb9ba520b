// The episode's start leaves the agent only the base commit's history, whatever the image held: a
// repository like an R2E-Gym image's (the whole upstream history, tags, a stash, FETCH_HEAD, the
// base stored as "<fix>^") is trimmed; a repository built trimmed is left as it is.
#include <catch2/catch.hpp>
#include <filesystem>

#include "episode.hpp"
#include "host_workspace.hpp"

using agent_env_test::HostWorkspace;
using agent_env_test::TempDir;
using mlpt::openhands::ShellResult;
using nlohmann::json;

namespace {
struct Repo {
  TempDir dir;
  HostWorkspace ws{dir.path};
  std::string git(const std::string& args) {
    ShellResult r = ws.shell("git -c user.name=t -c user.email=t@t " + args, 60000);
    INFO(args << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    return r.output.substr(0, r.output.find_last_not_of('\n') + 1);
  }
  void commit(const std::string& file, const std::string& text, const std::string& message) {
    agent_env_test::write(dir.path / file, text);
    git("add -A");
    git("commit -qm " + message);
  }
  mlpt::openhands::HarnessConfig config() {
    mlpt::openhands::HarnessConfig c;
    c.workspace = dir.str();
    c.state_dir = dir.str() + "/../" + dir.path.filename().string() + "_state";
    return c;
  }
  std::string out(const std::string& command) { return ws.shell(command, 60000).output; }
};
}  // namespace

TEST_CASE(
    "an image holding the fix and later history is trimmed to the base's history before the agent runs") {
  Repo repo;
  repo.git("init -q -b main");
  repo.commit("lib.py", "def f():\n    return 1\n", "first");
  repo.commit("README", "lib\n", "base");
  const std::string base = repo.git("rev-parse HEAD");
  repo.commit("lib.py", "def f():\n    return 2\n", "fix");
  const std::string fix = repo.git("rev-parse HEAD");
  repo.commit("later.py", "x = 1\n", "later");
  const std::string later = repo.git("rev-parse HEAD");
  // What an image prepared from the upstream repository can hold besides: a tag, a second branch, a
  // remote-tracking ref, a stash entry, FETCH_HEAD, and the work tree at the base on a detached HEAD.
  repo.git("tag v-fix " + fix);
  repo.git("branch feature " + later);
  repo.git("update-ref refs/remotes/origin/main " + later);
  agent_env_test::write(repo.dir.path / "lib.py", "def f():\n    return 3\n");
  repo.git("stash -q");
  repo.git("checkout -q --detach " + base);
  agent_env_test::write(repo.dir.path / ".git" / "FETCH_HEAD", later + "\t\tbranch 'main' of upstream\n");
  agent_env_test::write(repo.dir.path / "setup_env.sh", "echo set up\n");  // untracked, as R2E images have
  REQUIRE(repo.out("git cat-file -t " + fix) == "commit\n");

  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  // R2E-Gym rows store the base as "<fix>^".
  ep.start({{"problem_statement", "p"},
            {"commit_hash", fix},
            {"parsed_commit_content", json{{"old_commit_hash", fix + "^"}}.dump()}});
  CHECK(repo.out("git rev-parse HEAD") == base + "\n");
  for (const std::string& gone : {fix, later})
    CHECK(repo.out("git cat-file -e " + gone + " 2>/dev/null && echo PRESENT") == "");
  CHECK(repo.out("git for-each-ref --format='%(refname)'") == "");
  CHECK(repo.out("git rev-list --all --reflog | sort") == repo.out("git rev-list " + base + " | sort"));
  CHECK(repo.out("git cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$'") ==
        "2\n");
  CHECK_FALSE(std::filesystem::exists(repo.dir.path / ".git" / "FETCH_HEAD"));
  CHECK_FALSE(std::filesystem::exists(repo.dir.path / ".git" / "ORIG_HEAD"));
  // The work tree and the base's history are the agent's as before.
  CHECK(agent_env_test::read(repo.dir.path / "lib.py") == "def f():\n    return 1\n");
  CHECK(repo.out("git log --format=%s") == "base\nfirst\n");
  CHECK(repo.out("git status --porcelain") == "?? setup_env.sh\n");
  const json result = ep.finish("finish");
  CHECK(result["history_trimmed"] == true);
  CHECK(result["base_commit"] == base);
  CHECK(result["untracked_at_start"] == json::array({"setup_env.sh"}));
}

TEST_CASE("a branch at the fix with the work tree at the base is moved to the base, its files kept") {
  Repo repo;
  repo.git("init -q -b main");
  repo.commit("lib.py", "def f():\n    return 1\n", "base");
  const std::string base = repo.git("rev-parse HEAD");
  repo.commit("lib.py", "def f():\n    return 2\n", "fix");
  const std::string fix = repo.git("rev-parse HEAD");
  agent_env_test::write(repo.dir.path / "lib.py",
                        "def f():\n    return 1\n");  // the base's file on the fix's branch
  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  ep.start({{"problem_statement", "p"},
            {"commit_hash", fix},
            {"parsed_commit_content", json{{"old_commit_hash", base}}}});
  CHECK(repo.out("git symbolic-ref HEAD") == "refs/heads/main\n");
  CHECK(repo.out("git rev-parse main") == base + "\n");
  CHECK(repo.out("git cat-file -e " + fix + " 2>/dev/null && echo PRESENT") == "");
  CHECK(repo.out("git status --porcelain") == "");
  CHECK(ep.finish("finish")["history_trimmed"] == true);
}

TEST_CASE("a repository that holds only the base's history is left as it is") {
  Repo repo;
  repo.git("init -q -b main");
  repo.commit("lib.py", "def f():\n    return 1\n", "first");
  repo.commit("README", "lib\n", "base");
  const std::string base = repo.git("rev-parse HEAD");
  repo.git("gc -q --prune=now");
  const std::string objects_before =
      repo.out("find .git/objects .git/refs -type f | sort; git reflog | wc -l");
  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  // The fix named by the record is not in this repository (built trimmed).
  ep.start({{"problem_statement", "p"}, {"commit_hash", std::string(40, 'f')}});
  CHECK(repo.out("find .git/objects .git/refs -type f | sort; git reflog | wc -l") == objects_before);
  CHECK(repo.out("git rev-parse HEAD") == base + "\n");
  CHECK(ep.finish("finish")["history_trimmed"] == false);
}
