from textkit import pluralize, slugify, truncate, wrap


def test_truncate_short_text_is_unchanged():
    assert truncate("abc", 5) == "abc"


def test_slugify_lowercases():
    assert slugify("ABC") == "abc"


def test_pluralize_regular():
    assert pluralize("cat") == "cats"
    assert pluralize("city") == "cities"


def test_wrap_single_word():
    assert wrap("hello", 3) == ["hello"]
