"""rangeset: half-open integer intervals and helpers around them."""

from rangeset.interval import Interval, merge, total_length
from rangeset.parse import chunk, parse_ranges

__all__ = ["Interval", "chunk", "merge", "parse_ranges", "total_length"]
__version__ = "1.1.0"
