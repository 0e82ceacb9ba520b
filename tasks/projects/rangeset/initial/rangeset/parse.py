"""Parsing page-range strings and splitting sequences."""


def parse_ranges(text):
    """Parse "1-3,7,9-10" into the sorted list of the numbers it names (ends inclusive)."""
    numbers = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = (int(p) for p in part.split("-", 1))
            if hi < lo:
                raise ValueError(f"range {part!r} ends before it starts")
            numbers.update(range(lo, hi))
        else:
            numbers.add(int(part))
    return sorted(numbers)


def chunk(seq, size):
    """Split `seq` into lists of `size` items; the last one may be shorter."""
    if size <= 0:
        raise ValueError("size must be positive")
    items = list(seq)
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]
