PROBLEM = """slugify leaves a separator at the end when the text ends with punctuation

```python
>>> from textkit import slugify
>>> slugify("Hello, World!")
'hello-world-'
```

A slug should never start or end with the separator; expected `'hello-world'`. The same happens
with a custom separator: `slugify("Release 2.0 (beta)", sep="_")` gives `'release_2_0_beta_'`.
"""
EDITS = [("textkit/strings.py",
          "            prev_sep = True\n    return \"\".join(out)\n",
          "            prev_sep = True\n    if prev_sep:\n        out.pop()\n    return \"\".join(out)\n")]
