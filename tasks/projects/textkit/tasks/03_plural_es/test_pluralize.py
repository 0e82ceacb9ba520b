import pytest

from textkit import pluralize


@pytest.mark.parametrize("word,plural", [("box", "boxes"), ("church", "churches"),
                                         ("bus", "buses"), ("wish", "wishes"), ("quiz", "quizes")])
def test_sibilant_endings(word, plural):
    assert pluralize(word) == plural


def test_count_one_is_singular():
    assert pluralize("box", 1) == "box"


def test_consonant_y():
    assert pluralize("party") == "parties"


def test_vowel_y():
    assert pluralize("day") == "days"
