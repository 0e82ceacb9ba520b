from rangeset import Interval, total_length


def test_overlap_counted_once():
    assert total_length([Interval(0, 5), Interval(3, 8)]) == 8


def test_duplicates_counted_once():
    assert total_length([Interval(2, 4), Interval(2, 4)]) == 2


def test_disjoint_sum():
    assert total_length([Interval(0, 1), Interval(5, 7)]) == 3


def test_nothing():
    assert total_length([]) == 0
