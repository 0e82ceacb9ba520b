PROBLEM = """total_length counts overlapping parts twice

`total_length` should count how many integers are covered by at least one interval, but
overlapping intervals are counted more than once:

```python
>>> from rangeset import Interval, total_length
>>> total_length([Interval(0, 5), Interval(3, 8)])
10
```

Expected `8` (0..7).
"""
EDITS = [("rangeset/interval.py",
          "    return sum(len(iv) for iv in intervals)\n",
          "    return sum(len(iv) for iv in merge(intervals))\n")]
