import pytest

from textkit import truncate


def test_cut_text_fits_width():
    assert truncate("The quick brown fox", 10) == "The qui..."


@pytest.mark.parametrize("width", [4, 5, 8, 12])
def test_result_never_longer_than_width(width):
    assert len(truncate("abcdefghijklmnopqrstuvwxyz", width)) == width


def test_short_text_unchanged():
    assert truncate("short", 10) == "short"


def test_tiny_width_gives_part_of_ellipsis():
    assert truncate("abcdef", 2) == ".."


def test_negative_width_rejected():
    with pytest.raises(ValueError):
        truncate("abc", -1)
