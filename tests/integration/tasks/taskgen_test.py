"""Task preparation (tasks/taskgen.py, docs/benchmark.md §4): an R2E-Gym base stored as `<fix>^` resolves
to the real parent commit, and the repository an image gets holds the base's history only (the fix
commit is no object of it: no ref, reflog entry or pack names it)."""
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

source = Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("taskgen", source / "tasks" / "taskgen.py")
taskgen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(taskgen)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as work:
    repo, commits = taskgen.build_repo(taskgen.projects()[0], work)
    c = commits[1]
    assert taskgen.resolve_base(repo, c["commit"] + "^") == c["base"], "fix^ does not resolve to the base"
    assert taskgen.resolve_base(repo, c["base"]) == c["base"]
    dest = Path(work) / "image" / "testbed"
    taskgen.checkout(repo, c["base"], dest)
    assert git(dest, "rev-parse", "HEAD").stdout.strip() == c["base"]
    assert git(dest, "cat-file", "-e", c["commit"]).returncode != 0, "the fix commit is an object of the image's repository"
    log = git(dest, "log", "--all", "--reflog", "--format=%H").stdout.split()
    assert c["commit"] not in log and c["base"] in log, log
    assert git(dest, "rev-list", "--all", "--reflog", "--not", "HEAD").stdout.strip() == "", "commits past HEAD"
print("taskgen: <fix>^ resolved, image history ends at the base")
