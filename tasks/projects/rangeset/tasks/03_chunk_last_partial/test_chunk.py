import pytest

from rangeset import chunk


def test_last_chunk_may_be_short():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_size_larger_than_input():
    assert chunk([1, 2], 5) == [[1, 2]]


def test_even_split():
    assert chunk("abcdef", 3) == [["a", "b", "c"], ["d", "e", "f"]]


def test_empty_input():
    assert chunk([], 3) == []


def test_zero_size_rejected():
    with pytest.raises(ValueError):
        chunk([1], 0)
