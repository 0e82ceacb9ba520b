"""One line of a KEY=value file."""


def parse_line(line):
    """Parse one line into (key, value); None for blank lines and comments.

    Values may be quoted with ' or "; outside quotes, " #" starts a comment.
    """
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    if line.startswith("export "):
        line = line[len("export "):]
    key, sep, value = line.partition("=")
    if not sep:
        raise ValueError(f"missing '=' in line {line!r}")
    key = key.strip()
    if not key:
        raise ValueError(f"missing key in line {line!r}")
    value = value.strip()
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        return key, value[1:-1]
    if " #" in value:
        value = value.split(" #", 1)[0].rstrip()
    return key, value
