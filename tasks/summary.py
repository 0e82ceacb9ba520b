"""pytest's "short test summary info" -> {test name: status}, by the rules of docs/benchmark.md §4.

The same rules as plugins/reward_r2e/pytest_summary.cpp (the grader); this copy lets taskgen.py
compute expected_output_json without a build. ANSI codes and carriage returns are removed; every
PASSED/FAILED/ERROR line after the section header gives one entry named by the part after the
file (`::` parts joined with `.`), with the " - reason" cut.
"""
import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
STATUSES = ("PASSED", "FAILED", "ERROR")


def parse_summary(output):
    text = _ANSI.sub("", output).replace("\r", "")
    at = text.find("short test summary info")
    if at < 0:
        return {}
    result = {}
    for line in text[at:].split("\n")[1:]:
        status, _, rest = line.partition(" ")
        if status not in STATUSES:
            continue
        cut = rest.find(" - ")
        if cut >= 0:
            rest = rest[:cut]
        parts = rest.strip().split("::")
        name = ".".join(parts[1:]) if len(parts) > 1 else parts[0]
        result[name] = status
    return result
