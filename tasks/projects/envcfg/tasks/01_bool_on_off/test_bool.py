import pytest

from envcfg import parse_bool


def test_on_is_true():
    assert parse_bool("on") is True
    assert parse_bool(" ON ") is True


def test_off_is_false():
    assert parse_bool("Off") is False


def test_existing_words():
    assert parse_bool("true") is True
    assert parse_bool("0") is False


def test_garbage_rejected():
    with pytest.raises(ValueError):
        parse_bool("maybe")
