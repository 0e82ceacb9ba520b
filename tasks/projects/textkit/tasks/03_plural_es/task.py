PROBLEM = """pluralize gives wrong plurals for words ending in s, x, z, ch or sh

```python
>>> from textkit import pluralize
>>> pluralize("box")
'boxs'
>>> pluralize("church")
'churchs'
```

English adds "es" after a sibilant: expected `'boxes'`, `'churches'`, `'buses'`, `'wishes'`.
Singular counts must still return the word unchanged.
"""
EDITS = [("textkit/strings.py",
          "        return word[:-1] + \"ies\"\n    return word + \"s\"\n",
          "        return word[:-1] + \"ies\"\n    if word.endswith((\"s\", \"x\", \"z\", \"ch\", \"sh\")):\n        return word + \"es\"\n    return word + \"s\"\n")]
