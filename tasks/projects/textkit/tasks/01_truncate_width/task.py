PROBLEM = """truncate() returns a string one character longer than the requested width

`truncate(text, width)` is documented to never return more than `width` characters, but when
the text is cut the result is one character too long:

```python
>>> from textkit import truncate
>>> truncate("The quick brown fox", 10)
'The quic...'
>>> len(_)
11
```

Expected `'The qui...'` (10 characters).
"""
EDITS = [("textkit/strings.py",
          "    return text[: width - len(ellipsis) + 1] + ellipsis\n",
          "    return text[: width - len(ellipsis)] + ellipsis\n")]
