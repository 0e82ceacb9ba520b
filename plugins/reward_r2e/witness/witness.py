# The grading witness: the first code of the hidden-test interpreter (the supervisor's `python3`,
# `python` and `pytest` start it, isolated, from a folder outside the repository), before pytest
# runs and before any repository code can be imported. It has two roles.
#
# The judge (the interpreter the supervisor's shims start, MLPT_WITNESS_SOCKET set): it never runs
# repository code. It connects to the supervisor's one-connection socket (a channel no other
# process can open: a socket cannot be reopened through /proc, and the supervisor accepts only the
# first connection), then forks one child to collect the tests and one child per collected test,
# and decides each test's status itself, from what it observes across the process boundary: the
# child's exit status (waitpid), the child's pytest summary line, and the child's signed events.
# A test counts only when all three agree. Only its verdicts reach the supervisor.
#
# A test child (forked by the judge, or MLPT_WITNESS_FD set for a single run) runs the command line
# it was given with pytest restricted to one test. Before any repository code it
#  - installs an audit hook (which Python cannot remove) that refuses, when repository code is on
#    the stack, reading the hidden tests or this witness, replacing the code of pytest's, pluggy's
#    or the hidden tests' functions, reading the code of the runner, of this witness or
#    (while tests run) of the hidden tests, walking the heap (gc), and starting processes while the
#    tests are being collected; and that reports frame access, tracing and ctypes as suspect;
#  - compiles the hidden tests itself, as pytest's assertion rewriting does, and keeps only digests
#    of their code and constants (nothing of the tests' text stays in objects repository code can
#    walk to: closures and module globals are not audited), to check that the collected test runs
#    exactly that code and that the test module's imports, functions and constants are unchanged;
#  - prepares Landlock file rules (every file readable and writable but the hidden tests and the
#    runner script), which it applies when collection ends: from then on no name, link or
#    /proc path opens the hidden tests' bytes in this process or anything it starts;
#  - judges the test from the exceptions of its own setup, call and teardown, and sends that on its
#    own pipe with an HMAC under a key made after the fork and kept only in a generator's frame.
# A command line that is not the hidden-test run (a nested interpreter) runs plain.
import os
import sys

_SOCKET = os.environ.pop("MLPT_WITNESS_SOCKET", None)
_FD = os.environ.pop("MLPT_WITNESS_FD", None)
if _SOCKET is None and _FD is None:
    os.execv(sys.executable, [sys.executable] + sys.argv[1:])

import ast
import hashlib
import hmac
import json
import select
import threading
import types

WORKSPACE = os.path.realpath(os.environ.pop("MLPT_WITNESS_WORKSPACE", "/testbed"))
os.environ["PATH"] = os.environ.pop("MLPT_WITNESS_PATH", os.environ.get("PATH", ""))
HIDDEN_DIR = os.path.join(WORKSPACE, "r2e_tests")
RUN_TESTS = os.path.join(WORKSPACE, "run_tests.sh")
SELF = os.path.realpath(__file__)
SELF_DIR = os.path.dirname(SELF)
MAX_REPORTS = 64  # suspect events per kind and place are reported once, at most this many in all
MAX_CHILD_OUTPUT = 4 << 20  # what the judge keeps of one child's output to find its summary line
STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")

# No bytecode cache: pytest would write the rewritten hidden tests' code next to them.
sys.dont_write_bytecode = True

import pytest  # noqa: E402  (the system's pytest: the repository is not on sys.path)
import _pytest.outcomes  # noqa: E402
from _pytest.assertion.rewrite import rewrite_asserts  # noqa: E402

RUNNER_DIRS = tuple(os.path.dirname(os.path.realpath(m.__file__)) + os.sep
                    for m in (pytest, _pytest.outcomes, sys.modules.get("pluggy")) if m is not None)
# pytest's own rewriting: test modules and conftest files (python_files defaults; -c /dev/null).
REWRITTEN = lambda path: (os.path.basename(path).startswith("test_") or path.endswith("_test.py")
                          or os.path.basename(path) == "conftest.py")


def _hidden_files():
    """The hidden tests' paths and (device, inode) identities, and the SHA-256 of each one's bytes."""
    paths, identities, digests = [], set(), {}
    for root, _dirs, files in os.walk(HIDDEN_DIR):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    digests[path] = hashlib.sha256(f.read()).hexdigest()
                    st = os.fstat(f.fileno())
                    identities.add((st.st_dev, st.st_ino))
                paths.append(path)
    return sorted(paths), identities, digests


def _value_digest(value):
    return "%s:%s" % (type(value).__name__, hashlib.sha256(repr(value).encode("utf-8", "replace")).hexdigest())


def code_digest(code):
    """A digest of a code object and everything it holds (nested code by its own digest)."""
    consts = tuple(code_digest(c) if isinstance(c, types.CodeType) else _value_digest(c) for c in code.co_consts)
    parts = (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
             code.co_qualname, code.co_firstlineno, code.co_filename)
    return hashlib.sha256(repr(parts).encode("utf-8", "replace")).hexdigest()


def _pristine(path, source):
    """Digests of every function and class body of a hidden module {(qualname, first line): digest},
    and its top-level bindings: digests of literal constants, imports and definitions."""
    tree = ast.parse(source, filename=path)
    consts, imports, defs = {}, {}, set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = _value_digest(ast.literal_eval(node.value))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        elif isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if a.name != "*":
                    imports[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.add(node.name)
    if REWRITTEN(path):
        rewrite_asserts(tree, source, path, None)
    codes, todo = {}, [compile(tree, path, "exec", dont_inherit=True)]
    while todo:
        code = todo.pop()
        codes[(code.co_qualname, code.co_firstlineno)] = code_digest(code)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return {"codes": codes, "consts": consts, "imports": imports, "defs": defs}


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


# ---- Landlock: file rules the kernel enforces on this process and everything it starts ----
_LANDLOCK_READ_FILE, _LANDLOCK_WRITE_FILE, _LANDLOCK_TRUNCATE = 1 << 2, 1 << 1, 1 << 14
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # x86-64 and arm64 alike


def _landlock_prepare(protected):
    """A Landlock ruleset (its descriptor) that lets this process read and write every file but those
    in `protected` and anything later created beside them: each folder on the way from / to a
    protected file grants its other entries. (None, why) where the kernel has no Landlock."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return None, None, "the kernel has no Landlock (errno %d)" % ctypes.get_errno()
    handled = _LANDLOCK_READ_FILE | _LANDLOCK_WRITE_FILE | (_LANDLOCK_TRUNCATE if abi >= 3 else 0)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled)
    ruleset = syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return None, None, "landlock_create_ruleset failed (errno %d)" % ctypes.get_errno()
    on_path = {"/"}
    for p in protected:
        d = os.path.dirname(p)
        while d not in on_path:
            on_path.add(d)
            d = os.path.dirname(d)
    granted = set()
    for folder in sorted(on_path):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if path in on_path or path in protected or path in granted:
                continue
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                import stat
                rights = handled if stat.S_ISDIR(os.fstat(fd).st_mode) else handled & (
                    _LANDLOCK_READ_FILE | _LANDLOCK_WRITE_FILE | _LANDLOCK_TRUNCATE)
                rule = PathBeneath(rights, fd)
                if syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) == 0:
                    granted.add(path)
            finally:
                os.close(fd)
    restrict = lambda: syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0 or ctypes.get_errno()
    return ruleset, restrict, None


# ---- A test child: one pytest run (collect only, or one test), watched from inside ----
def _channel(fd, key):
    seq = 0
    send_code, audit_code = yield
    own = _channel.__code__.co_filename
    while True:
        kind_fields = yield
        # Only the witness sends: `send`, called at start (nothing but the witness on the stack),
        # from the audit hook, or from a hook pytest's plugin manager called; not from repository
        # code calling the witness's functions.
        f = sys._getframe(1)
        trusted, via_audit = f.f_code is send_code, False
        f = f.f_back
        while f is not None and f.f_code.co_filename == own:
            via_audit |= f.f_code is audit_code
            f = f.f_back
        if not (trusted and (via_audit or f is None or f.f_code.co_filename.startswith(RUNNER_DIRS))):
            where = "%s:%d" % (f.f_code.co_filename, f.f_lineno) if f is not None else "?"
            kind_fields = ("violation", {"what": "the witness's channel was called by %s" % where})
        kind, fields = kind_fields
        fields = dict(fields, t=kind, seq=seq)
        seq += 1
        body = json.dumps(fields, ensure_ascii=True, sort_keys=True, separators=(",", ":"), default=str)
        line = ("%s %s\n" % (hmac.new(key, body.encode(), hashlib.sha256).hexdigest(), body)).encode()
        while line:
            line = line[os.write(fd, line):]


def _start(fd, only=None, collect_only=False):
    """Sets up the witness in this (test) interpreter: events on `fd`; `only`: the node id of the one
    test this run may run; `collect_only`: the run lists the collected node ids."""
    os.set_inheritable(fd, False)
    key = os.urandom(32)
    announce = ("key %s\n" % key.hex()).encode()  # the first line, written before any repository code runs
    while announce:
        announce = announce[os.write(fd, announce):]
    gen = _channel(fd, key)
    next(gen)
    del key
    lock = threading.RLock()
    busy = threading.local()
    state = {"phase": "exposed", "items": {}, "modules": {}, "runs": {}, "reported": set(), "collected": False}
    kinds = {}
    protected_prefixes = ("_pytest", "pytest", "pluggy", "mlpt_grading_witness")

    # The hidden tests as this process reads them, before any repository code: digests only.
    hidden_paths, identities, digests = _hidden_files()
    hidden_set = set(hidden_paths)
    hidden_tails = {os.path.relpath(p, HIDDEN_DIR) for p in hidden_paths} | {os.path.basename(p) for p in hidden_paths}
    pristine = {}
    for path in hidden_paths:
        with open(path, "rb") as f:
            source = f.read()
        try:
            pristine[path] = _pristine(path, source)
        except SyntaxError:
            pristine[path] = None  # pytest reports the collection error itself
        del source
    ruleset, restrict, no_landlock = _landlock_prepare(hidden_paths + [RUN_TESTS])
    os_open, os_close, listdir = os.open, os.close, os.listdir  # bound before repository code can replace them

    def send(kind, **fields):
        with lock:
            busy.on = True
            try:
                gen.send((kind, fields))
            finally:
                busy.on = False

    # ---- Whose code is running ----
    def kind_of(filename):
        k = kinds.get(filename)
        if k is None:
            real = os.path.realpath(filename) if filename.startswith("/") else filename
            if real == SELF:
                k = "witness"
            elif real in hidden_set:
                k = "hidden"
            elif real.startswith(RUNNER_DIRS):
                k = "runner"
            elif real.startswith(WORKSPACE + os.sep):
                k = "workspace"
            else:
                k = "system"
            kinds[filename] = k
        return k

    def repository_on_stack(frame):
        """Repository code called into what raised the event, with no runner or test frame between."""
        for _ in range(200):
            if frame is None:
                return None
            k = kind_of(frame.f_code.co_filename)
            if k == "workspace":
                return frame
            if k != "system":
                return None
            frame = frame.f_back
        return None

    def direct_caller(frame):
        """The first frame outside inspect, traceback and linecache, when it is repository code."""
        for _ in range(3):
            if frame is None:
                return None
            name = os.path.basename(frame.f_code.co_filename)
            if name not in ("inspect.py", "traceback.py", "linecache.py"):
                break
            frame = frame.f_back
        return frame if frame is not None and kind_of(frame.f_code.co_filename) == "workspace" else None

    def where(frame):
        return "%s:%d" % (frame.f_code.co_filename, frame.f_lineno)

    def protected_function(obj):
        code = getattr(obj, "__code__", None)
        return (isinstance(code, types.CodeType) and kind_of(code.co_filename) in ("hidden", "witness", "runner")) or \
            str(getattr(obj, "__module__", "") or "").startswith(protected_prefixes)

    def protected_object(obj):
        if isinstance(obj, type):
            return str(obj.__module__).startswith(protected_prefixes) or any(
                kind_of(getattr(f, "__code__", None).co_filename) == "hidden"
                for f in vars(obj).values() if isinstance(getattr(f, "__code__", None), types.CodeType))
        if isinstance(obj, (types.FunctionType, types.MethodType)):
            return protected_function(obj)
        return False

    def report(kind, what, frame):
        key = (kind, what.split(" ")[0], where(frame))
        if key in state["reported"] or len(state["reported"]) >= MAX_REPORTS:
            return
        state["reported"].add(key)
        send(kind, what=what, at=where(frame))

    def names_hidden(path):
        """Whether `path` (a name given to open, link or rename) may be a hidden test, the runner script
        or this witness, under whatever name."""
        given = os.fsdecode(path)
        real = os.path.realpath(given)
        if real in hidden_set or real == RUN_TESTS or real.startswith(SELF_DIR + os.sep):
            return True
        if not given.startswith("/") and os.path.normpath(given).lstrip("./") in hidden_tails:
            return True
        try:
            st = os.stat(real)
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) in identities

    def judge(event, args, frame):
        if event == "open":
            path = args[0]
            if isinstance(path, int) or path is None:
                return None
            if names_hidden(path):
                culprit = repository_on_stack(frame)
                if culprit is not None:
                    return "violation", "read %s" % os.fsdecode(path), culprit
        elif event in ("os.link", "os.rename"):
            # Another name for a hidden test would be outside every check by name.
            if not isinstance(args[0], int) and names_hidden(args[0]):
                culprit = repository_on_stack(frame)
                if culprit is not None:
                    return "violation", "%s of %s" % (event, os.fsdecode(args[0])), culprit
        elif event == "object.__setattr__":
            if protected_object(args[0]):
                culprit = repository_on_stack(frame)
                if culprit is not None:
                    return "violation", "set %s of %r" % (args[1], args[0]), culprit
        elif event == "object.__getattr__":
            obj, name = args[0], args[1]
            culprit = direct_caller(frame)
            if culprit is None:
                return None
            if name in ("__code__", "__defaults__", "__kwdefaults__") and protected_function(obj):
                # A decorator of the repository may read a test's code while the module is imported.
                hidden = kind_of(obj.__code__.co_filename) == "hidden"
                return ("suspect" if hidden and state["phase"] == "exposed" else "violation"), "read %s of %r" % (name, obj), culprit
            if name in ("gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code"):
                code = getattr(obj, name[:3] + "code", None)
                if isinstance(code, types.CodeType) and kind_of(code.co_filename) in ("witness", "runner", "hidden"):
                    return "violation", "read %s of %r" % (name, obj), culprit
            return "suspect", "%s of a %s" % (name, type(obj).__name__), culprit
        elif event in ("sys._getframe", "sys._current_frames"):
            culprit = direct_caller(frame)
            if culprit is not None:
                return "suspect", event, culprit
        elif event.startswith("gc."):
            # A heap walk reaches every object, the witness's channel included (gc.get_referents
            # of a generator returns its locals).
            culprit = repository_on_stack(frame)
            if culprit is not None:
                return "violation", event, culprit
        elif event in ("sys.settrace", "sys.setprofile") or event.startswith("ctypes."):
            culprit = repository_on_stack(frame)
            if culprit is not None:
                return "suspect", event, culprit
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                       "pty.spawn"):
            if state["phase"] == "exposed":
                culprit = repository_on_stack(frame)
                if culprit is not None:
                    return "violation", "%s while the hidden tests are readable" % event, culprit
        return None

    watched = {"open", "os.link", "os.rename", "object.__setattr__", "object.__getattr__", "gc.get_objects", "gc.get_referrers",
               "gc.get_referents", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
               "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
               "pty.spawn"}

    def audit(event, args):
        if (event not in watched and not event.startswith("ctypes.")) or getattr(busy, "on", False):
            return
        busy.on = True
        try:
            verdict = judge(event, args, sys._getframe(1))
        except Exception as e:  # the witness must never be the reason a test fails
            verdict = None
            try:
                send("suspect", what="witness error on %s: %r" % (event, e), at="")
            except Exception:
                pass
        finally:
            busy.on = False
        if verdict is None:
            return
        kind, what, culprit = verdict
        with lock:
            report(kind, what, culprit)
        if kind == "violation":
            raise PermissionError("mlpt grading: refused: " + what)

    # ---- Integrity of pytest and of the hidden test modules ----
    callables = (type, types.FunctionType, classmethod, staticmethod, property)

    def runner_made(v):
        """Whether a value is pytest's or pluggy's own (pytest replaces some of its own attributes
        while it configures, e.g. legacypath's Config methods)."""
        v = getattr(v, "__func__", None) or getattr(v, "fget", None) or v
        code = getattr(v, "__code__", None)
        if isinstance(code, types.CodeType):
            return kind_of(code.co_filename) == "runner"
        return isinstance(v, type) and str(v.__module__).startswith(("_pytest", "pytest", "pluggy"))

    def snapshot_runner():
        """pytest's and pluggy's functions and classes, and the methods of those classes, by identity
        (Python audits only some attribute writes on classes, none on modules)."""
        snap = {}
        for name, mod in list(sys.modules.items()):
            if name.split(".")[0] not in ("_pytest", "pytest", "pluggy") or not isinstance(mod, types.ModuleType):
                continue
            for k, v in list(vars(mod).items()):
                if isinstance(v, (type, types.FunctionType)):
                    snap[(name, k)] = (vars(mod), k, v)
                if isinstance(v, type) and v.__module__ == name:
                    for a, w in list(vars(v).items()):
                        if isinstance(w, callables):
                            snap[(name, k + "." + a)] = (vars(v), a, w)
        return snap

    runner_snapshot = snapshot_runner()

    def check_runner():
        for (name, attr), (space, k, v) in runner_snapshot.items():
            now = space.get(k)
            if now is not v and not runner_made(now):
                send("violation", what="pytest's %s.%s was replaced" % (name, attr), at="")

    def same_code(fn, path):
        p = pristine.get(path)
        code = fn.__code__
        return p is not None and p["codes"].get((code.co_qualname, code.co_firstlineno)) == code_digest(code)

    def test_function(item):
        fn = getattr(item, "obj", None)
        seen = 0
        while fn is not None and seen < 20:
            fn = getattr(fn, "__func__", fn)
            code = getattr(fn, "__code__", None)
            if isinstance(code, types.CodeType) and os.path.realpath(code.co_filename) in hidden_set:
                return fn, os.path.realpath(code.co_filename)
            if isinstance(code, types.CodeType) and kind_of(code.co_filename) == "workspace":
                send("suspect", what="test %s is wrapped by repository code" % item.nodeid, at=code.co_filename)
            fn = getattr(fn, "__wrapped__", None)
            seen += 1
        return None, None

    def check_item(item):
        fn, path = test_function(item)
        if fn is None:
            send("violation", what="test %s does not run a hidden test's function" % item.nodeid, at="")
        elif not same_code(fn, path):
            send("violation", what="test %s runs code that is not the hidden test's" % item.nodeid, at=path)
        elif fn.__name__ != getattr(item, "originalname", item.name) or \
                not os.path.join(WORKSPACE, item.nodeid.split("::")[0]) == path:
            send("violation", what="test %s runs %s of %s" % (item.nodeid, fn.__name__, path), at=path)

    def check_module(mod):
        path = os.path.realpath(getattr(mod, "__file__", "") or "")
        p = pristine.get(path)
        if p is None:
            return
        g = vars(mod)
        for name, digest in p["consts"].items():
            if name in g and _value_digest(g[name]) != digest:
                send("violation", what="%s.%s is not the value its source binds" % (mod.__name__, name), at=path)
        for name in p["defs"]:
            obj = g.get(name)
            fns = [obj] if isinstance(obj, types.FunctionType) else (
                [f.__func__ if isinstance(f, (staticmethod, classmethod)) else f for f in vars(obj).values()] if isinstance(obj, type) else [])
            for f in fns:
                if isinstance(f, types.FunctionType) and os.path.realpath(f.__code__.co_filename) == path and not same_code(f, path):
                    send("violation", what="%s.%s is not the code its source defines" % (mod.__name__, f.__qualname__), at=path)
        for name, (module, attr) in p["imports"].items():
            source = sys.modules.get(module)
            origin = os.path.realpath(getattr(source, "__file__", "") or "")
            if source is None or origin.startswith(WORKSPACE + os.sep) or name not in g:
                continue  # the code under test, or not imported as written
            expected = source if attr is None else getattr(source, attr, g[name])
            if g[name] is not expected:
                send("violation", what="%s.%s is not what its import binds" % (mod.__name__, name), at=path)

    def seal():
        """Collection is over: the hidden tests' bytes become unreadable to this process and all it
        starts. Threads alive now would escape the rules (Landlock binds the calling thread)."""
        if no_landlock is not None:
            send("violation", what="the hidden tests cannot be sealed: " + no_landlock, at="")
            return
        threads = listdir("/proc/self/task")
        if len(threads) != 1:
            send("violation", what="%d threads are alive when collection ends (the file rules bind one)" % len(threads), at="")
        done = restrict()
        if done is not True:
            send("violation", what="landlock_restrict_self failed (errno %s)" % done, at="")
            return
        for path in hidden_paths[:1]:  # the rules hold: the kernel refuses the bytes to this process
            try:
                os_close(os_open(path, os.O_RDONLY))
                send("violation", what="%s is still readable after the seal" % path, at="")
            except PermissionError:
                pass
            except OSError as e:
                send("violation", what="%s: %s after the seal" % (path, e), at="")

    # ---- The pytest plugin: thin hooks over the state above ----
    def outcome_of(excinfo):
        if excinfo is None:
            return "ok"
        if issubclass(excinfo[0], _pytest.outcomes.XFailed):
            return "xfail"
        if issubclass(excinfo[0], _pytest.outcomes.Skipped):
            return "skip"
        return "exc"

    # PYTEST_DONT_REWRITE: pytest would warn that the plugin was imported before it could rewrite it.
    plugin = types.ModuleType("mlpt_grading_witness", "The grading witness (PYTEST_DONT_REWRITE).")

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(config):
        os.environ.pop("PYTEST_PLUGINS", None)
        send("configured")

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(report):
        if report.failed:
            send("collect_error", path=str(getattr(report, "nodeid", "") or ""))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(session, config, items):
        if only is None:
            return
        keep = [i for i in items if i.nodeid == only]
        if len(keep) != 1:
            send("violation", what="the test %s was collected %d times" % (only, len(keep)), at="")
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid != only])
        items[:] = keep

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(session):
        if state["collected"]:
            send("violation", what="a second collection", at="")
            return
        state["collected"] = True
        for item in session.items:
            state["items"][item.nodeid] = item
            check_item(item)
            mod = getattr(getattr(item, "module", None), "__name__", None)
            if mod is not None:
                state["modules"][mod] = item.module
        for mod in state["modules"].values():
            check_module(mod)
        check_runner()
        seal()
        state["phase"] = "running"
        send("collected", n=len(session.items), ids=[i.nodeid for i in session.items] if collect_only else [],
             sources=digests)

    # Hooks that decide whether a test's code runs and what its outcome is: a repository's hook
    # among them (a tracked conftest.py, or a plugin registered at run time) can pass a test whose
    # code never ran, which the phases seen here would not show. Reported as suspect.
    protocol_hooks = ("pytest_runtest_protocol", "pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_makereport")

    def check_protocol(item):
        for name in protocol_hooks:
            hook = getattr(item.ihook, name, None)
            for impl in (hook.get_hookimpls() if hook is not None else ()):
                code = getattr(getattr(impl, "function", None), "__code__", None)
                if isinstance(code, types.CodeType) and kind_of(code.co_filename) == "workspace":
                    key = ("protocol", name, code.co_filename)
                    if key not in state["reported"]:
                        state["reported"].add(key)
                        send("suspect", what="%s implemented by the repository (%s)" % (name, code.co_qualname),
                             at="%s:%d" % (code.co_filename, code.co_firstlineno))

    def phase_wrapper(when):
        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def wrapper(item):
            if when == "call" and state["items"].get(item.nodeid) is item:
                check_item(item)
                check_protocol(item)
            outcome = yield
            state["runs"].setdefault(item.nodeid, {})[when] = outcome_of(outcome.excinfo)
        return wrapper

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        yield
        run = state["runs"].pop(item.nodeid, {})
        if state["items"].get(item.nodeid) is not item:
            send("violation", what="a test that was not collected ran: %s" % item.nodeid, at="")
            return
        mod = getattr(item, "module", None)
        if mod is not None:
            check_module(mod)
        send("test", id=item.nodeid, setup=run.get("setup", "none"), call=run.get("call", "none"),
             teardown=run.get("teardown", "none"), xfail=item.get_closest_marker("xfail") is not None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session, exitstatus):
        check_runner()
        for mod in state["modules"].values():
            check_module(mod)
        send("finish", exitstatus=int(exitstatus), collected=state["collected"])

    plugin.pytest_configure = pytest_configure
    plugin.pytest_collectreport = pytest_collectreport
    plugin.pytest_collection_modifyitems = pytest_collection_modifyitems
    plugin.pytest_collection_finish = pytest_collection_finish
    plugin.pytest_runtest_setup = phase_wrapper("setup")
    plugin.pytest_runtest_call = phase_wrapper("call")
    plugin.pytest_runtest_teardown = phase_wrapper("teardown")
    plugin.pytest_runtest_protocol = pytest_runtest_protocol
    plugin.pytest_sessionfinish = pytest_sessionfinish

    gen.send((send.__code__, audit.__code__))
    sys.addaudithook(audit)
    send("boot", python=sys.version.split()[0], hidden=hidden_paths)
    sys.modules[plugin.__name__] = plugin
    os.environ["PYTEST_PLUGINS"] = plugin.__name__


# ---- Run the command line the interpreter was given (python3 [options] -c CODE|-m MODULE|FILE ...) ----
def _run(argv):
    import runpy
    isolated = ignore_env = False
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-c", "-m", "-"):
        flag = argv[i]
        isolated |= "I" in flag[1:] and not flag.startswith("--")
        ignore_env |= "E" in flag[1:] and not flag.startswith("--")
        i += 2 if flag in ("-W", "-X") else 1
    if not (isolated or ignore_env):
        sys.path[1:1] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != SELF_DIR]
    rest = argv[i:]
    if not rest:
        raise SystemExit("mlpt grading witness: no program to run")
    if rest[0] == "-c":
        sys.argv = ["-c"] + rest[2:]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(rest[1], "<string>", "exec"), main.__dict__)
    elif rest[0] == "-m":
        sys.argv = [rest[1]] + rest[2:]
        if not isolated:
            sys.path.insert(0, os.getcwd())
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = rest
        if not isolated:
            sys.path.insert(0, os.path.dirname(os.path.abspath(rest[0])))
        runpy.run_path(rest[0], run_name="__main__")


# ---- The judge: one child per test, each test's status decided here ----
def _verified_events(stream):
    """A child's events: its first line announces its key ("key <hex>"), every later line is
    "<hmac-sha256 hex> <JSON>" with sequence numbers from 0. (events, lines that are not the child
    witness's)."""
    lines = [l for l in stream.split(b"\n") if l]
    if not lines or not lines[0].startswith(b"key "):
        return [], len(lines)
    try:
        key = bytes.fromhex(lines[0][4:].decode("ascii"))
    except ValueError:
        return [], len(lines)
    parsed, malformed = [], 0
    for line in lines[1:]:
        mac, _, body = line.partition(b" ")
        try:
            event = json.loads(body)
            good = hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).hexdigest().encode()) and \
                isinstance(event, dict) and event.get("seq") == len(parsed)
        except ValueError:
            good = False
        if good:
            parsed.append(event)
        else:
            malformed += 1
    return parsed, malformed


def _child(argv, only, collect_only):
    """Runs in a forked child: stdout and stderr are already the judge's pipe; fd 3 the events."""
    try:
        _start(3, only=only, collect_only=collect_only)
        extra = ["--collect-only", "-q"] if collect_only else []
        _run(argv + extra)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:  # the interpreter's own exit work, as a plain run would do it (what it prints is judged too)
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code & 0xff)


def _fork_child(argv, only, collect_only, forward):
    """One child run; (exit status, events, malformed event lines, output)."""
    out_r, out_w = os.pipe()
    ev_r, ev_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # its own process group: whatever it leaves behind is killed with it
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.dup2(ev_w, 3)
            os.closerange(4, 1 << 16)  # the judge's socket and pipes stay with the judge
            _child(argv, only, collect_only)
        finally:
            os._exit(70)
    os.close(out_w)
    os.close(ev_w)
    output, events, open_fds = bytearray(), bytearray(), {out_r, ev_r}
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 1.0)
        if not ready and os.waitpid(pid, os.WNOHANG)[0] == pid:
            break  # exited, but something it started holds a pipe
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                forward(chunk)
                if len(output) < MAX_CHILD_OUTPUT:
                    output += chunk
            elif len(events) < (1 << 20):
                events += chunk
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = 0xff00
    try:
        os.killpg(pid, 9)
    except OSError:
        pass
    os.close(out_r)
    os.close(ev_r)
    code = os.waitstatus_to_exitcode(status)
    parsed, malformed = _verified_events(bytes(events))
    return (128 - code if code < 0 else code), parsed, malformed, bytes(output)


def _summary_status(output, nodeid):
    """The status pytest's summary gives `nodeid` in a child's output, or None."""
    found = None
    for raw in output.split(b"\n"):
        line = raw.decode("utf-8", "replace").replace("\r", "")
        head, _, rest = line.partition(" ")
        if head in STATUSES and (rest == nodeid or rest.startswith(nodeid + " - ")):
            if found is not None and found != head:
                return "two statuses"
            found = head
    return found


def _judge_test(nodeid, code, events, malformed, output, expected_sources):
    """(status, None) or (None, why) for one test child, from the three views."""
    if malformed:
        return None, "%d lines on the child's channel were not its witness's" % malformed
    kinds = [e.get("t") for e in events]
    if "violation" in kinds:
        return None, "the child's witness refused: " + events[kinds.index("violation")].get("what", "")
    if "boot" not in kinds or "collected" not in kinds or "finish" not in kinds:
        return None, "the child's witness saw no complete pytest session"
    collected = events[kinds.index("collected")]
    if collected.get("sources") != expected_sources:
        return None, "the child collected other hidden tests than the judge's"
    finish = events[kinds.index("finish")]
    if finish.get("exitstatus") != code:
        return None, "pytest ended with status %s but the child exited %d" % (finish.get("exitstatus"), code)
    tests = [e for e in events if e.get("t") == "test"]
    if len(tests) != 1 or tests[0].get("id") != nodeid:
        return None, "the child ran %s, not exactly %s" % ([t.get("id") for t in tests], nodeid)
    t = tests[0]
    setup, call, teardown, xfail = t.get("setup"), t.get("call"), t.get("teardown"), t.get("xfail")
    if setup == "exc":
        seen = {"ERROR"}
    elif setup == "skip":
        seen = {"SKIPPED"}
    elif call == "ok":
        seen = {"XPASS", "FAILED"} if xfail else {"PASSED"}
    elif call == "exc":
        seen = {"XFAIL"} if xfail else {"FAILED"}
    elif call in ("skip", "xfail"):
        seen = {"SKIPPED", "XFAIL"}
    else:
        return None, "the child's witness never saw %s run (setup=%s call=%s)" % (nodeid, setup, call)
    if teardown == "exc":
        seen.add("ERROR")
    status = _summary_status(output, nodeid)
    if status is None and seen <= {"SKIPPED", "XFAIL"} and code == 0:
        status = "SKIPPED" if "SKIPPED" in seen else "XFAIL"  # pytest's summary line of a skip names no test
    if status not in seen:
        return None, "the summary says %s, the child's witness saw setup=%s call=%s teardown=%s" % (status, setup, call, teardown)
    if (code == 0) != (status in ("PASSED", "SKIPPED", "XFAIL", "XPASS")):
        return None, "the child exited %d on a %s test" % (code, status)
    return status, None


def _judge(sock_name):
    import socket
    chan = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    chan.connect("\0" + sock_name)
    try:  # nothing the children start can read this process's memory or descriptors through /proc
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass

    def send(kind, **fields):
        chan.sendall((json.dumps(dict(fields, t=kind), ensure_ascii=True, sort_keys=True, default=str) + "\n").encode())

    def forward(chunk):
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view):]

    hidden_paths, _identities, sources = _hidden_files()
    send("boot", python=sys.version.split()[0], hidden=hidden_paths)
    argv = sys.argv[1:]

    def relay(events, child):
        for e in events:
            if e.get("t") in ("violation", "suspect"):
                send(e["t"], what=e.get("what", ""), at=e.get("at", ""), child=child)

    code, events, malformed, output = _fork_child(argv, None, True, forward)
    relay(events, "collection")
    collected = [e for e in events if e.get("t") == "collected"]
    if malformed or not collected or collected[0].get("sources") != sources:
        send("untrusted", id="", why="the collection child's report is missing or not its witness's")
        send("finish", tests=0)
        return 1
    ids = collected[0].get("ids", [])
    for e in events:
        if e.get("t") == "collect_error":  # a file that does not import: pytest's summary key "" (no "::")
            send("verdict", id=e.get("path", ""), status="ERROR")
    failed = False
    for nodeid in ids:
        if not isinstance(nodeid, str) or os.path.join(WORKSPACE, nodeid.split("::")[0]) not in hidden_paths:
            send("untrusted", id=str(nodeid), why="collected a test outside the hidden tests")
            failed = True
            continue
        code, events, malformed, output = _fork_child(argv, nodeid, False, forward)
        relay(events, nodeid)
        status, why = _judge_test(nodeid, code, events, malformed, output, sources)
        if status is None:
            send("untrusted", id=nodeid, why=why)
        else:
            send("verdict", id=nodeid, status=status)
        failed |= status not in ("PASSED", "SKIPPED", "XFAIL", "XPASS")
    send("finish", tests=len(ids))
    return 1 if failed else 0


if _SOCKET is not None:
    sys.exit(_judge(_SOCKET))
_start(int(_FD))
_run(sys.argv[1:])
