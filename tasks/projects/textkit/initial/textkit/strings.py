"""String helpers. Every function takes and returns plain `str` values."""


def truncate(text, width, ellipsis="..."):
    """Shorten `text` to at most `width` characters.

    When the text is cut, it ends with `ellipsis`, and the result including the ellipsis is
    never longer than `width`.
    """
    if width < 0:
        raise ValueError("width must be >= 0")
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    return text[: width - len(ellipsis) + 1] + ellipsis


def slugify(text, sep="-"):
    """Lower-case `text` and join its runs of letters and digits with `sep`.

    >>> slugify("Hello, World")
    'hello-world'
    """
    out = []
    prev_sep = False
    for ch in text.lower():
        if ch.isalnum():
            out.append(ch)
            prev_sep = False
        elif not prev_sep and out:
            out.append(sep)
            prev_sep = True
    return "".join(out)


def pluralize(word, count=2):
    """The English plural of `word` unless `count` is 1 (simple rules only)."""
    if count == 1:
        return word
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def wrap(text, width=70):
    """Split `text` into lines of at most `width` characters, breaking between words.

    A word longer than `width` gets a line of its own.
    """
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) < width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def camel_to_snake(name):
    """Convert a CamelCase or mixedCase identifier to snake_case."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i > 0:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
