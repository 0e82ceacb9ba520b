"""The Config object and the loader."""

from envcfg.parser import parse_line
from envcfg.values import parse_bool


class Config:
    def __init__(self, values):
        self._values = values

    def __contains__(self, key):
        return key in self._values

    def keys(self):
        return sorted(self._values)

    def get(self, key, default=None):
        return self._values.get(key, default)

    def get_int(self, key, default=None):
        value = self._values.get(key, default)
        return int(value)

    def get_bool(self, key, default=False):
        if key not in self._values:
            return default
        return parse_bool(self._values[key])

    def get_list(self, key, sep=","):
        value = self._values.get(key, "")
        return value.split(sep)


def load(text, defaults={}):
    """Parse the text of a KEY=value file; `defaults` fills keys the text does not set."""
    values = defaults
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parsed = parse_line(line)
        except ValueError as e:
            raise ValueError(f"line {number}: {e}") from None
        if parsed is not None:
            values[parsed[0]] = parsed[1]
    return Config(values)
