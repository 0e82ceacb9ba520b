#!/usr/bin/env python3
"""Builds the bundled SWE task suite from tasks/projects/<name>/.

Each project is a small Python library: `initial/` is its first imported tree (with the bugs), and
each `tasks/<NN_slug>/` is one later commit that fixes one bug the way R2E-Gym mines them:
`task.py` holds the problem statement and the source edits (path, old text, new text), and the
`test_*.py` beside it is the test the fixing commit adds (it becomes the task's hidden tests).

    taskgen.py repos OUT          git repositories, one per project, with fixed authors and dates,
                                  so every commit hash is the same on every machine
    taskgen.py suite              regenerates tasks/suite.jsonl, tasks/validation.jsonl and
                                  tasks/golden.jsonl (runs the hidden tests at base and fix commit)
    taskgen.py rootfs OUT [STEM]  one image root per task (or only the named ones): OUT/<stem>/testbed
                                  is the repository at the base commit (history up to it only) plus one
                                  untracked file; /.mlpt/binds.json asks for the host's /usr (Python,
                                  pytest from python3-pytest, git, bash) read-only
    taskgen.py check              the committed JSONL agrees with the repositories built now, and
                                  every golden patch applies at its base and gives the fix's files

The last task of every project goes to validation.jsonl, the others to suite.jsonl.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROJECTS = ROOT / "projects"
OWNER = "mlpt"
TEST_PYTHON = os.environ.get("MLPT_TASK_PYTHON", "/usr/bin/python3")

# The hidden-test runner every image gets (docs/benchmark.md §4: `pytest -rA r2e_tests`). The
# interpreter runs isolated (-I: no PYTHON* variables, no working directory or user site on
# sys.path) and the repository joins sys.path only when the session starts, after pytest and its
# plugins are imported, and after the system paths, so no file in /testbed can stand in for pytest,
# a plugin or a module they import while starting; `-c /dev/null` ignores ini files the agent
# might add. The grader also sets PYTEST_DISABLE_PLUGIN_AUTOLOAD.
RUN_TESTS_SH = """#!/bin/sh
cd /testbed || exit 2
exec python3 -I -B -c 'import sys, pytest
class Repository:
    def pytest_sessionstart(self, session):
        sys.path.append("/testbed")
sys.exit(pytest.main(plugins=[Repository()]))' \\
  -rA -p no:cacheprovider -c /dev/null --rootdir=/testbed r2e_tests "$@"
"""

# An untracked file present at container start, like the setup files R2E-Gym images carry; the
# grader excludes every such file from the agent's patch.
UNTRACKED_FILE = ("setup_env.sh", "#!/bin/sh\n# The environment of this image is ready; nothing to do.\n")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "mlpt tasks", "GIT_AUTHOR_EMAIL": "tasks@mlpt.invalid",
    "GIT_COMMITTER_NAME": "mlpt tasks", "GIT_COMMITTER_EMAIL": "tasks@mlpt.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent", "TZ": "UTC", "LC_ALL": "C",
}


def git(repo, *args, date=None, capture=True, strip=True):
    env = dict(os.environ)
    env.update(GIT_ENV)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    out = subprocess.run(["git", "-C", str(repo), "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false",
                          "-c", "commit.gpgsign=false", *args],
                         env=env, check=True, stdout=subprocess.PIPE if capture else None, text=True)
    # A diff keeps its text as git wrote it: a hunk's last context line may be a blank line (" ").
    return (out.stdout.strip() if strip else out.stdout) if capture else ""


def load_tasks(project):
    tasks = []
    for d in sorted((PROJECTS / project / "tasks").iterdir()):
        spec = {}
        exec((d / "task.py").read_text(), spec)
        tests = sorted(d.glob("test_*.py"))
        if len(tests) != 1:
            sys.exit(f"{d}: expected exactly one test_*.py, found {len(tests)}")
        tasks.append({"slug": d.name, "dir": d, "problem": spec["PROBLEM"], "edits": spec["EDITS"],
                      "test_name": tests[0].name, "test_text": tests[0].read_text()})
    return tasks


def apply_edits(repo, edits, where):
    for path, old, new in edits:
        f = Path(repo) / path
        text = f.read_text()
        if text.count(old) != 1:
            sys.exit(f"{where}: the old text of {path} occurs {text.count(old)} times (must be once)")
        f.write_text(text.replace(old, new))


def build_repo(project, out):
    """The project's history: the initial import, then one fixing commit per task (dates fixed)."""
    repo = Path(out) / project
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(PROJECTS / project / "initial", repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"Initial import of {project}", date="2024-01-01T10:00:00Z")
    commits = []
    for i, task in enumerate(load_tasks(project)):
        base = git(repo, "rev-parse", "HEAD")
        apply_edits(repo, task["edits"], task["dir"])
        (repo / "tests" / task["test_name"]).write_text(task["test_text"])
        title = task["problem"].strip().splitlines()[0]
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"Fix: {title}", date=f"2024-01-{i + 2:02d}T10:00:00Z")
        commits.append({"task": task, "base": base, "commit": git(repo, "rev-parse", "HEAD"), "title": title})
    return repo, commits


def resolve_base(repo, base):
    """The real commit of an R2E-Gym base, which rows may store as `<fix>^` (docs/benchmark.md §4)."""
    return base if re.fullmatch(r"[0-9a-f]{40}", base) else git(repo, "rev-parse", "--verify", base + "^{commit}")


def checkout(repo, commit, dest):
    """A repository at `commit` holding only the history up to it (no later objects to peek at)."""
    dest = Path(dest)
    dest.mkdir(parents=True)
    git(dest, "init", "-q")
    git(dest, "fetch", "-q", "--no-tags", str(repo), commit)
    git(dest, "reset", "-q", "--hard", "FETCH_HEAD")
    (dest / ".git" / "FETCH_HEAD").unlink()
    git(dest, "gc", "-q", "--prune=now")


def run_hidden(tree, test_name, test_text):
    """Runs the hidden test in `tree` as the grader does; returns (statuses, output)."""
    sys.path.insert(0, str(ROOT))
    from summary import parse_summary  # noqa: E402 (the same rules as the reward, in Python)
    tests = Path(tree) / "r2e_tests"
    tests.mkdir(exist_ok=True)
    (tests / test_name).write_text(test_text)
    script = RUN_TESTS_SH.replace("/testbed", str(tree)).replace("python3 ", TEST_PYTHON + " ", 1)
    out = subprocess.run(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=60).stdout
    shutil.rmtree(tests)
    return parse_summary(out), out


def entity_name(text, old):
    """The def/class enclosing the edited text (for modified_entity_summaries)."""
    before = text[: text.index(old)]
    names = re.findall(r"^\s*(?:def|class) (\w+)", before, re.M)
    return names[-1] if names else "<module>"


def make_record(project, c, work):
    task, base, fix = c["task"], c["base"], c["commit"]
    repo = Path(work) / project
    with tempfile.TemporaryDirectory() as tmp:
        before_tree, after_tree = Path(tmp) / "before", Path(tmp) / "after"
        checkout(repo, base, before_tree)
        checkout(repo, fix, after_tree)
        old_status, _ = run_hidden(before_tree, task["test_name"], task["test_text"])
        new_status, new_output = run_hidden(after_tree, task["test_name"], task["test_text"])
        before_texts = {p: (before_tree / p).read_text() for p, _, _ in task["edits"]}
    if not any(new_status.get(k) != v for k, v in old_status.items()) and old_status == new_status:
        sys.exit(f"{task['dir']}: the hidden tests give the same result before and after the fix")
    if any(v != "PASSED" for v in new_status.values()):
        sys.exit(f"{task['dir']}: hidden tests do not all pass after the fix:\n{new_output}")
    files = sorted({p for p, _, _ in task["edits"]})
    patch = git(repo, "diff", base, fix, "--", *files, strip=False)
    entities = sorted({(p, entity_name(before_texts[p], old)) for p, old, _ in task["edits"]})
    changed = sum(1 for line in patch.splitlines()
                  if line[:1] in "+-" and not line.startswith(("+++", "---")))
    instance = f"{OWNER}__{project}-{fix}"
    return {
        "instance_id": instance,
        "repo_name": project,
        "docker_image": f"{OWNER}/{project}_final:{fix}",
        "commit_hash": fix,
        "parsed_commit_content": json.dumps({
            "old_commit_hash": base, "new_commit_hash": fix, "commit_message": f"Fix: {c['title']}",
            "file_diffs": [{"path": p, "diff": git(repo, "diff", base, fix, "--", p, strip=False)} for p in files]
                          + [{"path": f"tests/{task['test_name']}", "diff": "(test file added)"}]}),
        "execution_result_content": json.dumps({"old_test_status": old_status, "new_test_status": new_status}),
        "modified_files": files,
        "modified_entity_summaries": [{"file": p, "name": n, "type": "function", "change": "modified"}
                                      for p, n in entities],
        "relevant_files": files + [f"tests/{task['test_name']}"],
        "num_non_test_files": len(files),
        "num_non_test_func_methods": len(entities),
        "num_non_test_lines": changed,
        "prompt": task["problem"],
        "problem_statement": task["problem"],
        "expected_output_json": json.dumps(new_status, sort_keys=True),
        # mlpt extension: the hidden tests travel in the record, never in the image, so the agent's
        # sandbox cannot hold them; the grader writes them into its own fresh sandbox.
        "hidden_tests": {f"r2e_tests/{task['test_name']}": task["test_text"], "run_tests.sh": RUN_TESTS_SH},
    }, {"instance_id": instance, "slug": f"{project}/{task['slug']}", "patch": patch,
        "edits": [{"path": f"/testbed/{p}", "old_str": o, "new_str": n} for p, o, n in task["edits"]],
        "old_test_status": old_status}


def projects():
    return sorted(p.name for p in PROJECTS.iterdir() if (p / "initial").is_dir())


def cmd_repos(out):
    Path(out).mkdir(parents=True, exist_ok=True)
    for project in projects():
        _, commits = build_repo(project, out)
        for c in commits:
            print(project, c["task"]["slug"], c["base"][:12], "->", c["commit"][:12])


def cmd_suite():
    suite, validation, golden = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for project in projects():
            _, commits = build_repo(project, work)
            for i, c in enumerate(commits):
                record, gold = make_record(project, c, work)
                (validation if i == len(commits) - 1 else suite).append(record)
                golden.append(gold)
                print("task", gold["slug"], "expected", len(json.loads(record["expected_output_json"])), "tests,",
                      sum(1 for v in gold["old_test_status"].values() if v != "PASSED"), "failing before the fix")
    for name, rows in (("suite.jsonl", suite), ("validation.jsonl", validation), ("golden.jsonl", golden)):
        with open(ROOT / name, "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(name):
    return [json.loads(line) for line in (ROOT / name).read_text().splitlines() if line.strip()]


BINDS = {"binds": ["/usr", {"host": "/etc/alternatives", "optional": True},
                   {"host": "/etc/ld.so.cache", "optional": True}]}


def cmd_rootfs(out, only):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = read_jsonl("suite.jsonl") + read_jsonl("validation.jsonl")
    if only:
        records = [r for r in records if f"{r['repo_name']}_final_{r['commit_hash']}" in only]
    with tempfile.TemporaryDirectory() as work:
        repos = {p: build_repo(p, work)[0] for p in projects()}
        for r in records:
            base = resolve_base(repos[r["repo_name"]], json.loads(r["parsed_commit_content"])["old_commit_hash"])
            stem = f"{r['repo_name']}_final_{r['commit_hash']}"
            root = out / stem
            if root.exists():
                shutil.rmtree(root)
            checkout(repos[r["repo_name"]], base, root / "testbed")
            (root / "testbed" / UNTRACKED_FILE[0]).write_text(UNTRACKED_FILE[1])
            # The rest of the root: merged-/usr links, scratch and home folders, the bind request.
            for link in ("bin", "lib", "lib64", "sbin"):
                os.symlink(f"usr/{link}", root / link)
            for d, mode in (("usr", 0o755), ("tmp", 0o1777), ("root", 0o700), ("etc", 0o755), (".mlpt", 0o755)):
                (root / d).mkdir(exist_ok=True)
                os.chmod(root / d, mode)
            (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
            (root / ".mlpt" / "binds.json").write_text(json.dumps(BINDS, indent=1) + "\n")
            print(stem)


def golden_patch_problem(repo, record, golden):
    """None when the golden patch applies at the base and gives the fix's files; else what is wrong."""
    base, fix = record["parsed_commit_content"]["old_commit_hash"], record["commit_hash"]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "testbed"
        checkout(repo, base, tree)
        applied = subprocess.run(["git", "-C", str(tree), "apply", "-"], input=golden["patch"], text=True,
                                 capture_output=True)
        if applied.returncode != 0:
            return "golden patch does not apply at the base: " + applied.stderr.strip()
        for path in record["modified_files"]:
            if (tree / path).read_text() != git(repo, "show", f"{fix}:{path}", strip=False):
                return f"golden patch applied at the base does not give the fix's {path}"
    return None


def cmd_check():
    bad = 0
    golden = {g["instance_id"]: g for g in read_jsonl("golden.jsonl")}
    with tempfile.TemporaryDirectory() as work:
        fixes, repos = {}, {}
        for p in projects():
            repos[p], commits = build_repo(p, work)
            for c in commits:
                fixes[c["commit"]] = c["base"]
        for r in read_jsonl("suite.jsonl") + read_jsonl("validation.jsonl"):
            r = dict(r, parsed_commit_content=json.loads(r["parsed_commit_content"]))
            if fixes.get(r["commit_hash"]) != r["parsed_commit_content"]["old_commit_hash"]:
                print(f"{r['instance_id']}: not reproduced by the repositories built now; run taskgen.py suite")
                bad += 1
            elif r["instance_id"] not in golden:
                print(f"{r['instance_id']}: no record in golden.jsonl")
                bad += 1
            elif problem := golden_patch_problem(repos[r["repo_name"]], r, golden[r["instance_id"]]):
                print(f"{r['instance_id']}: {problem}")
                bad += 1
    print(f"taskgen check: {bad} problem(s) in {len(golden)} golden records")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("repos", "suite", "rootfs", "check"):
        sys.exit(__doc__)
    {"repos": lambda: cmd_repos(sys.argv[2]), "suite": cmd_suite, "rootfs": lambda: cmd_rootfs(sys.argv[2], set(sys.argv[3:])),
     "check": cmd_check}[sys.argv[1]]()
