PROBLEM = """camel_to_snake splits acronyms into single letters

```python
>>> from textkit import camel_to_snake
>>> camel_to_snake("HTTPServer")
'h_t_t_p_server'
>>> camel_to_snake("getHTTPResponse")
'get_h_t_t_p_response'
```

An acronym should stay one word: expected `'http_server'` and `'get_http_response'`.
Plain CamelCase must keep working (`'ParseConfig'` -> `'parse_config'`).
"""
EDITS = [("textkit/strings.py",
          "        if ch.isupper() and i > 0:\n            out.append(\"_\")\n",
          "        if ch.isupper() and i > 0:\n            prev = name[i - 1]\n            nxt = name[i + 1] if i + 1 < len(name) else \"\"\n            if prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower()):\n                out.append(\"_\")\n")]
