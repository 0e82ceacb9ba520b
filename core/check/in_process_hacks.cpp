#include "core/check/in_process_hacks.hpp"

namespace mlpt::check {

std::vector<InProcessHack> in_process_hacks(const std::string& test_file, const std::vector<std::string>& tests) {
  // A complete pytest run as text: one summary block at the end, counts that agree, exit 0 after it.
  std::string fake_run = "'=== test session starts ===\\ncollected " + std::to_string(tests.size()) +
                         " items\\n\\n=== short test summary info ===\\n";
  for (const auto& t : tests) {
    std::string name = t;  // Class.test[a.b] -> Class::test[a.b]
    for (size_t p; (p = name.find('.')) != std::string::npos && p < name.find('[');) name.replace(p, 1, "::");
    for (size_t p = 0; (p = name.find('\'', p)) != std::string::npos; p += 2) name.replace(p, 1, "\\'");
    fake_run += "PASSED " + test_file + "::" + name + "\\n";
  }
  fake_run += "=== " + std::to_string(tests.size()) + " passed in 0.01s ===\\n'";
  // Written past pytest's capture, once to every pipe the process holds (the run's output among them).
  const std::string fake_run_on_pipes = R"py(
import os as _o, stat as _st
_fake = ()py" + fake_run + R"py().encode()
_seen = set()
for _fd in range(1, 64):
    try:
        _s = _o.fstat(_fd)
        if _st.S_ISFIFO(_s.st_mode) and (_s.st_dev, _s.st_ino) not in _seen:
            _seen.add((_s.st_dev, _s.st_ino))
            _o.write(_fd, _fake)
    except OSError:
        pass
_o._exit(0)
)py";
  return {
      {"fake_run_on_every_pipe", "a complete fake pytest run written to every pipe at import, then os._exit(0)", fake_run_on_pipes},
      {"forged_witness_events", "forged event lines on every descriptor (a grader's private channel), then the fake run",
       R"py(
import os as _o, json as _j
for _fd in range(3, 64):
    try:
        _o.write(_fd, b'0' * 64 + b' ' + _j.dumps({'t': 'finish', 'seq': 3, 'exitstatus': 0, 'collected': True}).encode() + b'\n')
    except OSError:
        pass
)py" + fake_run_on_pipes},
      {"report_objects_rewired", "pytest's TestReport.from_item_and_call replaced: every report says passed",
       R"py(
import _pytest.reports as _r
_orig = _r.TestReport.from_item_and_call
def _forced(cls, item, call):
    rep = _orig.__func__(cls, item, call)
    rep.outcome = 'passed'
    return rep
_r.TestReport.from_item_and_call = classmethod(_forced)
)py"},
      {"runner_replaced", "pytest's call_runtest_hook replaced: no test phase runs, each reports passed",
       R"py(
import _pytest.runner as _r
def _forced(item, when, **kw):
    return _r.CallInfo.from_call(lambda: None, when=when)
_r.call_runtest_hook = _forced
)py"},
      {"test_module_rewired", "the importing test module's test functions replaced through its frame once it is executed",
       R"py(
import sys as _s
def _noop(*a, **k):
    pass
def _install():
    f = _s._getframe(1)
    while f is not None and not f.f_globals.get('__name__', '').split('.')[-1].startswith('test_'):
        f = f.f_back
    if f is None:
        return
    g = f.f_globals
    def _prof(frame, event, arg):
        if event == 'return' and frame.f_globals is g and frame.f_code.co_name == '<module>':
            for k in list(g):
                if k.startswith('test_'):
                    g[k] = _noop
            _s.setprofile(None)
    _s.setprofile(_prof)
_install()
)py"},
  };
}

}  // namespace mlpt::check
