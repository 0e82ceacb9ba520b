# The grading witness: the first code of the hidden-test interpreter (the supervisor's `python3`,
# `python` and `pytest` start it, isolated, from a folder outside the repository), before pytest
# runs and before any repository code can be imported. It
#  - installs an audit hook (which Python cannot remove) that refuses, when repository code is on
#    the stack, reading the hidden tests or this witness, replacing the code of pytest's, pluggy's
#    or the hidden tests' functions, reading the code of the runner, of this witness or
#    (while tests run) of the hidden tests, walking the heap (gc), and starting processes while the
#    hidden tests are still on disk; and that reports frame access, tracing and ctypes as suspect;
#  - compiles the hidden tests itself, as pytest's assertion rewriting does, and checks that every
#    collected test runs exactly that code, that the test modules' imports, functions and literal
#    constants are still the ones their source binds, and that pytest's and pluggy's functions,
#    classes and class attributes are the ones it saw before any repository code ran;
#  - judges each test from the exceptions of its own setup, call and teardown (not from pytest's
#    reports), deletes the hidden test modules once collected, and
#  - sends all of it to the supervisor on its own pipe, each event with an HMAC under a key made
#    here and kept only in a generator's frame (which the audit hook keeps repository code from
#    reading), in sequence.
# A command line that is not the hidden-test run (a nested interpreter) runs plain.
import os
import sys

_FD = os.environ.pop("MLPT_WITNESS_FD", None)
if _FD is None:
    os.execv(sys.executable, [sys.executable] + sys.argv[1:])

import ast
import hashlib
import hmac
import json
import threading
import types

WORKSPACE = os.path.realpath(os.environ.pop("MLPT_WITNESS_WORKSPACE", "/testbed"))
os.environ["PATH"] = os.environ.pop("MLPT_WITNESS_PATH", os.environ.get("PATH", ""))
HIDDEN_DIR = os.path.join(WORKSPACE, "r2e_tests")
RUN_TESTS = os.path.join(WORKSPACE, "run_tests.sh")
SELF = os.path.realpath(__file__)
SELF_DIR = os.path.dirname(SELF)
MAX_REPORTS = 64  # suspect events per kind and place are reported once, at most this many in all

# ---- The hidden tests, read before any repository code exists in this process ----
SOURCES = {}
IDENTITIES = set()  # (device, inode) of each: the same file under any other name (a hard link, /proc/N/root)
for _root, _dirs, _files in os.walk(HIDDEN_DIR):
    for _name in _files:
        if _name.endswith(".py"):
            _path = os.path.join(_root, _name)
            with open(_path, "rb") as _f:
                SOURCES[_path] = _f.read()
                _st = os.fstat(_f.fileno())
                IDENTITIES.add((_st.st_dev, _st.st_ino))
# A relative name is resolved by the audit hook against the working directory, but os.open(...,
# dir_fd=) resolves it against a folder the hook is not told: a relative name that ends like a
# hidden test's path is taken for it.
HIDDEN_TAILS = {os.path.relpath(p, HIDDEN_DIR) for p in SOURCES} | {os.path.basename(p) for p in SOURCES}
# No bytecode cache: pytest would write the rewritten hidden tests' code next to them, readable by
# another name than theirs while the tests run.
sys.dont_write_bytecode = True

import pytest  # noqa: E402  (the system's pytest: the repository is not on sys.path)
import _pytest.outcomes  # noqa: E402
from _pytest.assertion.rewrite import rewrite_asserts  # noqa: E402

RUNNER_DIRS = tuple(os.path.dirname(os.path.realpath(m.__file__)) + os.sep
                    for m in (pytest, _pytest.outcomes, sys.modules.get("pluggy")) if m is not None)
# pytest's own rewriting: test modules and conftest files (python_files defaults; -c /dev/null).
REWRITTEN = lambda path: (os.path.basename(path).startswith("test_") or path.endswith("_test.py")
                          or os.path.basename(path) == "conftest.py")


def _pristine(path, source):
    """{(qualname, first line): code} of every function and class body in the hidden module, and its
    top-level bindings: literal constants, imports and definitions."""
    tree = ast.parse(source, filename=path)
    consts, imports, defs = {}, {}, set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
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
        codes[(code.co_qualname, code.co_firstlineno)] = code
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return {"codes": codes, "consts": consts, "imports": imports, "defs": defs}


PRISTINE = {}
for _path, _source in SOURCES.items():
    try:
        PRISTINE[_path] = _pristine(_path, _source)
    except SyntaxError:
        PRISTINE[_path] = None  # pytest reports the collection error itself


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:
        return False


# ---- The event channel: a generator holds the key; only the witness's own code may send ----
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


def _start():
    fd = int(_FD)
    os.set_inheritable(fd, False)
    key = os.urandom(32)
    announce = ("key %s\n" % key.hex()).encode()  # the first line, written before any repository code runs
    while announce:
        announce = announce[os.write(fd, announce):]
    gen = _channel(fd, key)
    next(gen)
    lock = threading.RLock()
    busy = threading.local()
    state = {"phase": "exposed", "items": {}, "modules": {}, "runs": {}, "reported": set(), "collected": False}
    kinds = {}
    protected_prefixes = ("_pytest", "pytest", "pluggy", "mlpt_grading_witness")

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
            elif real in SOURCES:
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
        if real in SOURCES or real == RUN_TESTS or real.startswith(SELF_DIR + os.sep):
            return True
        if not given.startswith("/") and os.path.normpath(given).lstrip("./") in HIDDEN_TAILS:
            return True
        try:
            st = os.stat(real)
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) in IDENTITIES

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
                    return "violation", "%s while the hidden tests are on disk" % event, culprit
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
        p = PRISTINE.get(path)
        code = fn.__code__
        return p is not None and p["codes"].get((code.co_qualname, code.co_firstlineno)) == code

    def test_function(item):
        fn = getattr(item, "obj", None)
        seen = 0
        while fn is not None and seen < 20:
            fn = getattr(fn, "__func__", fn)
            code = getattr(fn, "__code__", None)
            if isinstance(code, types.CodeType) and os.path.realpath(code.co_filename) in SOURCES:
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
        p = PRISTINE.get(path)
        if p is None:
            return
        g = vars(mod)
        for name, value in p["consts"].items():
            if name in g and (type(g[name]) is not type(value) or not _equal(g[name], value)):
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
        loaded = {os.path.realpath(getattr(m, "__file__", "") or "") for m in list(sys.modules.values())}
        for path in list(SOURCES) + [RUN_TESTS]:
            if path in loaded or path == RUN_TESTS:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        state["phase"] = "running"
        send("collected", n=len(session.items))

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
    plugin.pytest_collection_finish = pytest_collection_finish
    plugin.pytest_runtest_setup = phase_wrapper("setup")
    plugin.pytest_runtest_call = phase_wrapper("call")
    plugin.pytest_runtest_teardown = phase_wrapper("teardown")
    plugin.pytest_runtest_protocol = pytest_runtest_protocol
    plugin.pytest_sessionfinish = pytest_sessionfinish

    gen.send((send.__code__, audit.__code__))
    sys.addaudithook(audit)
    send("boot", python=sys.version.split()[0], hidden=sorted(SOURCES))
    sys.modules[plugin.__name__] = plugin
    os.environ["PYTEST_PLUGINS"] = plugin.__name__


_start()
del _start


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


_run(sys.argv[1:])
