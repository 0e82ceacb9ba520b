PROBLEM = """merge() does not merge intervals that touch

`merge` is documented to merge overlapping *or touching* intervals, but adjacent half-open
intervals stay separate:

```python
>>> from rangeset import Interval, merge
>>> merge([Interval(1, 3), Interval(3, 5)])
[Interval(1, 3), Interval(3, 5)]
```

Expected `[Interval(1, 5)]`, since together they cover 1..4 without a gap.
"""
EDITS = [("rangeset/interval.py",
          "        if out and iv.start < out[-1].end:\n",
          "        if out and iv.start <= out[-1].end:\n")]
