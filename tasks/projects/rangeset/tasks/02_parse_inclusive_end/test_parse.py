import pytest

from rangeset import parse_ranges


def test_range_end_is_inclusive():
    assert parse_ranges("1-3,7") == [1, 2, 3, 7]


def test_single_element_range():
    assert parse_ranges("4-4") == [4]


def test_overlapping_parts_deduplicated():
    assert parse_ranges("1-2, 2-3") == [1, 2, 3]


def test_blank_parts_ignored():
    assert parse_ranges("5,,6") == [5, 6]


def test_reversed_range_rejected():
    with pytest.raises(ValueError):
        parse_ranges("9-2")
