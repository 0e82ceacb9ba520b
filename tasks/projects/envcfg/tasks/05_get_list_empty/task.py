PROBLEM = """Config.get_list returns [''] for unset keys and keeps spaces

```python
>>> from envcfg import load
>>> load("").get_list("HOSTS")
['']
>>> load("HOSTS=a, b ,c").get_list("HOSTS")
['a', ' b ', 'c']
```

Expected `[]` for an unset or empty value, and items stripped of surrounding spaces:
`['a', 'b', 'c']`. Empty items (`"a,,b"`) should be skipped.
"""
EDITS = [("envcfg/config.py",
          "        return value.split(sep)\n",
          "        return [item.strip() for item in value.split(sep) if item.strip()]\n")]
