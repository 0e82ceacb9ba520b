from rangeset import Interval, merge


def test_touching_intervals_merge():
    assert merge([Interval(1, 3), Interval(3, 5)]) == [Interval(1, 5)]


def test_chain_of_touching_intervals():
    assert merge([Interval(5, 6), Interval(0, 2), Interval(2, 5)]) == [Interval(0, 6)]


def test_gap_keeps_intervals_apart():
    assert merge([Interval(1, 2), Interval(3, 4)]) == [Interval(1, 2), Interval(3, 4)]


def test_contained_interval_absorbed():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]


def test_empty_input():
    assert merge([]) == []
