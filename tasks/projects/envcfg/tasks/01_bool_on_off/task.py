PROBLEM = """parse_bool rejects "on" and "off"

Many configuration files use `on`/`off` for switches, but they are refused:

```python
>>> from envcfg import parse_bool
>>> parse_bool("on")
ValueError: not a boolean: 'on'
```

`on` should be `True` and `off` should be `False`, like `yes`/`no` (case-insensitive).
"""
EDITS = [("envcfg/values.py",
          "TRUE_WORDS = {\"1\", \"true\", \"yes\"}\nFALSE_WORDS = {\"0\", \"false\", \"no\"}\n",
          "TRUE_WORDS = {\"1\", \"true\", \"yes\", \"on\"}\nFALSE_WORDS = {\"0\", \"false\", \"no\", \"off\"}\n")]
