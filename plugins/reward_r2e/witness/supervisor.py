# The grading supervisor: a process of its own that never imports or runs repository code. The
# grader starts it in the grading sandbox (python3 -I -B, from a folder outside the repository) as
#   supervisor.py KEY_FILE NONCE WORKSPACE COMMAND
# It reads the per-grading key and deletes its file before anything else runs, makes itself
# non-dumpable (the code under test cannot read its memory or its file descriptors through /proc),
# and runs COMMAND (the hidden-test run) with stdout and stderr on a pipe of its own. The run's
# `python3`, `python` and `pytest` start the witness's judge (witness.py), which connects to a
# socket only the supervisor listens on, once: the supervisor accepts the first connection and
# closes the listener, so the judge's verdicts arrive on a channel no other process can write
# (a socket cannot be reopened through /proc, and the judge's is never inherited). The supervisor
# forwards the output, counts and hashes it, and ends its own output with one record line
#   @@MLPT_WITNESS@@ <hmac-sha256 hex of JSON> <JSON>
# holding the run's true exit status, the output's length and SHA-256, and the judge's events.
# Bytes the code under test writes to the sandbox's output by any other path change the hash or
# follow the record; a record it prints itself has no valid HMAC, as the key never reaches it.
import hashlib
import hmac
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time

MAX_EVENT_BYTES = 1 << 20  # what the grader reads of the witness's events
DRAIN_AFTER_EXIT_S = 1.0  # how long output is still forwarded after the run's process exits


def make_nondumpable():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE, 0
    except Exception:
        return False


def write_shims(folder, witness, real_python):
    # The run's `python3`, `python` and `pytest` start the witness first (then the command line they
    # were given); the witness restores PATH, so interpreters the tests start run plain.
    os.makedirs(folder, exist_ok=True)
    for name, lead in (("python3", ""), ("python", ""), ("pytest", " -m pytest")):
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec %s -I -B %s%s \"$@\"\n" % (real_python, witness, lead))
        os.chmod(path, 0o555)


def judge_events(stream):
    """The judge's events: one JSON object a line. (events, lines that are not JSON objects)."""
    parsed, malformed = [], 0
    for line in stream.split(b"\n"):
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            parsed.append(event)
        else:
            malformed += 1
    return parsed, malformed


def main():
    key_file, nonce, workspace, command = sys.argv[1:5]
    with open(key_file, "rb") as f:
        key = f.read().strip()
    os.unlink(key_file)
    nondumpable = make_nondumpable()
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("PATH", "/usr/bin:/bin")
    real_python = shutil.which("python3", path=path) or sys.executable
    shims = os.path.join(here, "bin")
    write_shims(shims, os.path.join(here, "witness.py"), real_python)

    out_r, out_w = os.pipe()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = "mlpt-grading-%s-%s" % (nonce, os.urandom(8).hex())
    listener.bind("\0" + name)
    listener.listen(1)
    env = dict(os.environ)
    env.update({"PATH": shims + ":" + path, "MLPT_WITNESS_PATH": path, "MLPT_WITNESS_SOCKET": name,
                "MLPT_WITNESS_WORKSPACE": workspace, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    proc = subprocess.Popen(["sh", "-c", command], cwd=workspace, stdin=subprocess.DEVNULL, stdout=out_w,
                            stderr=out_w, env=env)
    os.close(out_w)

    digest, out_bytes, events, events_cut, connections = hashlib.sha256(), 0, bytearray(), False, 0
    ev = None
    open_fds, exited_at = {out_r, listener.fileno()}, None
    while open_fds:
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None and time.monotonic() - exited_at > DRAIN_AFTER_EXIT_S:
            break  # a process the run left behind keeps a pipe open: stop reading
        ready, _, _ = select.select(list(open_fds), [], [], 0.2)
        for fd in ready:
            if fd == listener.fileno():  # the judge, first and only: the listener goes away
                ev, _ = listener.accept()
                connections += 1
                open_fds.discard(fd)
                listener.close()
                open_fds.add(ev.fileno())
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                digest.update(chunk)
                out_bytes += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(1, view):]
            elif len(events) + len(chunk) <= MAX_EVENT_BYTES:
                events += chunk
            else:
                events_cut = True
    exit_code = proc.wait()
    if exit_code < 0:
        exit_code = 128 - exit_code

    parsed, malformed = judge_events(bytes(events))
    record = json.dumps({"nonce": nonce, "exit": exit_code, "out_bytes": out_bytes, "out_sha256": digest.hexdigest(),
                         "nondumpable": nondumpable, "events": parsed, "events_malformed": malformed,
                         "events_cut": events_cut, "judged": connections == 1}, ensure_ascii=True, sort_keys=True,
                        separators=(",", ":"))
    mac = hmac.new(key, record.encode(), hashlib.sha256).hexdigest()
    line = ("\n@@MLPT_WITNESS@@ %s %s\n" % (mac, record)).encode()
    while line:
        line = line[os.write(1, line):]
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
