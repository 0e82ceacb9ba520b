"""Conversions from configuration text to Python values."""

TRUE_WORDS = {"1", "true", "yes"}
FALSE_WORDS = {"0", "false", "no"}


def parse_bool(text):
    """Interpret a configuration word as a boolean (case-insensitive)."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {text!r}")
