PROBLEM = """Quoted values followed by a comment keep their quotes and the comment

```python
>>> from envcfg import parse_line
>>> parse_line('GREETING="hello world"  # shown at login')
('GREETING', '"hello world"  # shown at login')
```

Expected `('GREETING', 'hello world')`. A `#` inside the quotes is part of the value:
`parse_line("TAG='a # b' # note")` should give `('TAG', 'a # b')`.
"""
EDITS = [("envcfg/parser.py",
          "    if len(value) >= 2 and value[0] in \"'\\\"\" and value[-1] == value[0]:\n        return key, value[1:-1]\n",
          "    if value[:1] in (\"'\", '\"'):\n        closing = value.find(value[0], 1)\n        if closing != -1:\n            return key, value[1:closing]\n")]
