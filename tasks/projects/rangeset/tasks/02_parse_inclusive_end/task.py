PROBLEM = """parse_ranges drops the last number of every range

Page ranges are inclusive, as the docstring says, but the end of a range is missing:

```python
>>> from rangeset import parse_ranges
>>> parse_ranges("1-3,7")
[1, 2, 7]
```

Expected `[1, 2, 3, 7]`. A range like `"4-4"` returns nothing at all instead of `[4]`.
"""
EDITS = [("rangeset/parse.py",
          "            numbers.update(range(lo, hi))\n",
          "            numbers.update(range(lo, hi + 1))\n")]
