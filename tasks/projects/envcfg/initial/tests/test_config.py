import pytest

from envcfg import load, parse_bool, parse_line


def test_parse_simple_line():
    assert parse_line("A=1") == ("A", "1")


def test_comment_line():
    assert parse_line("# hello") is None


def test_parse_bool_yes():
    assert parse_bool("Yes") is True


def test_load_reports_line_number():
    with pytest.raises(ValueError, match="line 2"):
        load("A=1\nnot a pair\n")
