"""textkit: small helpers for human-readable text."""

from textkit.strings import camel_to_snake, pluralize, slugify, truncate, wrap

__all__ = ["camel_to_snake", "pluralize", "slugify", "truncate", "wrap"]
__version__ = "0.3.0"
