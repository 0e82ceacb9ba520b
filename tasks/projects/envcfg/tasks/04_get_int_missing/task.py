PROBLEM = """Config.get_int crashes for a missing key without a default

```python
>>> from envcfg import load
>>> load("A=1").get_int("PORT")
TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'
```

Like `get()`, `get_int()` should return the default (None unless given) when the key is not set.
"""
EDITS = [("envcfg/config.py",
          "    def get_int(self, key, default=None):\n        value = self._values.get(key, default)\n        return int(value)\n",
          "    def get_int(self, key, default=None):\n        if key not in self._values:\n            return default\n        return int(self._values[key])\n")]
