PROBLEM = """chunk() loses the items of the last, shorter chunk

```python
>>> from rangeset import chunk
>>> chunk([1, 2, 3, 4, 5], 2)
[[1, 2], [3, 4]]
>>> chunk([1, 2], 5)
[]
```

The docstring says the last chunk may be shorter; expected `[[1, 2], [3, 4], [5]]` and
`[[1, 2]]`. No item should ever be dropped.
"""
EDITS = [("rangeset/parse.py",
          "    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]\n",
          "    return [items[i:i + size] for i in range(0, len(items), size)]\n")]
