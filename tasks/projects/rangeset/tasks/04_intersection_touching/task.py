PROBLEM = """Interval.intersection returns an empty interval for touching intervals

For half-open intervals that only touch, `intersection` should return `None` (they share no
point), but it returns an empty interval:

```python
>>> from rangeset import Interval
>>> Interval(1, 3).intersection(Interval(3, 5))
Interval(3, 3)
```

This disagrees with `overlaps()`, which correctly says `False` for the same pair.
"""
EDITS = [("rangeset/interval.py",
          "        if self.start > other.end or other.start > self.end:\n",
          "        if self.start >= other.end or other.start >= self.end:\n")]
