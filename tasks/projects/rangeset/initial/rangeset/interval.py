"""Half-open intervals [start, end) over integers."""


class Interval:
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        if end < start:
            raise ValueError(f"interval end {end} is before its start {start}")
        self.start = start
        self.end = end

    def __len__(self):
        return self.end - self.start

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self):
        return hash((self.start, self.end))

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    def contains(self, x):
        return self.start <= x < self.end

    def overlaps(self, other):
        return self.start < other.end and other.start < self.end

    def intersection(self, other):
        """The common part of two intervals, or None when they share no point."""
        if self.start > other.end or other.start > self.end:
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))


def merge(intervals):
    """Merge overlapping or touching intervals into a sorted list of disjoint ones."""
    out = []
    for iv in sorted(intervals, key=lambda i: (i.start, i.end)):
        if out and iv.start < out[-1].end:
            out[-1] = Interval(out[-1].start, max(out[-1].end, iv.end))
        else:
            out.append(Interval(iv.start, iv.end))
    return out


def total_length(intervals):
    """How many integers are covered by at least one of the intervals."""
    return sum(len(iv) for iv in intervals)
