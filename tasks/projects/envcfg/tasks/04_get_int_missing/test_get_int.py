import pytest

from envcfg import load


def test_missing_key_gives_none():
    assert load("A=1").get_int("PORT") is None


def test_missing_key_gives_default():
    assert load("").get_int("PORT", 8080) == 8080


def test_present_key_converted():
    assert load("PORT=443").get_int("PORT", 80) == 443


def test_non_numeric_rejected():
    with pytest.raises(ValueError):
        load("PORT=http").get_int("PORT")
