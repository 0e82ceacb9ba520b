import pytest

from rangeset import Interval, chunk, merge, parse_ranges


def test_length():
    assert len(Interval(2, 5)) == 3


def test_reversed_rejected():
    with pytest.raises(ValueError):
        Interval(5, 2)


def test_merge_overlapping():
    assert merge([Interval(1, 4), Interval(2, 6)]) == [Interval(1, 6)]


def test_parse_single_numbers():
    assert parse_ranges("3,1") == [1, 3]


def test_chunk_even():
    assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
