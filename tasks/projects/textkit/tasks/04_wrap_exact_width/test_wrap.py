from textkit import wrap


def test_line_of_exact_width_kept():
    assert wrap("aaa bbb", 7) == ["aaa bbb"]


def test_all_lines_within_width():
    text = "the quick brown fox jumps over the lazy dog"
    lines = wrap(text, 9)
    assert all(len(line) <= 9 for line in lines)
    assert lines == ["the quick", "brown fox", "jumps", "over the", "lazy dog"]


def test_long_word_alone():
    assert wrap("a supercalifragilistic b", 5) == ["a", "supercalifragilistic", "b"]


def test_empty_text():
    assert wrap("", 10) == []
