PROBLEM = """wrap() breaks lines that exactly fit the width

`wrap(text, width)` should allow lines of *at most* `width` characters, but a line that would be
exactly `width` characters long is split:

```python
>>> from textkit import wrap
>>> wrap("aaa bbb", 7)
['aaa', 'bbb']
```

Expected `['aaa bbb']`.
"""
EDITS = [("textkit/strings.py",
          "        elif len(current) + 1 + len(word) < width:\n",
          "        elif len(current) + 1 + len(word) <= width:\n")]
