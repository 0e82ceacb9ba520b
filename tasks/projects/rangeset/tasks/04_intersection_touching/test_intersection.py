from rangeset import Interval


def test_touching_intervals_have_no_intersection():
    assert Interval(1, 3).intersection(Interval(3, 5)) is None
    assert Interval(3, 5).intersection(Interval(1, 3)) is None


def test_overlap_gives_common_part():
    assert Interval(1, 5).intersection(Interval(3, 8)) == Interval(3, 5)


def test_disjoint_gives_none():
    assert Interval(1, 2).intersection(Interval(5, 6)) is None


def test_agrees_with_overlaps():
    a, b = Interval(0, 4), Interval(4, 9)
    assert (a.intersection(b) is not None) == a.overlaps(b)
