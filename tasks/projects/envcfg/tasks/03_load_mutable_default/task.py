PROBLEM = """load() leaks keys between calls and modifies the defaults passed in

```python
>>> from envcfg import load
>>> load("A=1").keys()
['A']
>>> load("B=2").keys()
['A', 'B']
```

The second config should only contain `B`. Likewise, `load("X=1", defaults=base)` adds `X` to
the caller's `base` dictionary; the defaults passed in must not be modified.
"""
EDITS = [("envcfg/config.py",
          "def load(text, defaults={}):\n",
          "def load(text, defaults=None):\n"),
         ("envcfg/config.py",
          "    values = defaults\n",
          "    values = dict(defaults or {})\n")]
