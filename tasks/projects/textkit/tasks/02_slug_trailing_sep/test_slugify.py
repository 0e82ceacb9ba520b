from textkit import slugify


def test_trailing_punctuation_dropped():
    assert slugify("Hello, World!") == "hello-world"


def test_custom_separator_trailing():
    assert slugify("Release 2.0 (beta)", sep="_") == "release_2_0_beta"


def test_leading_punctuation_dropped():
    assert slugify("...and more") == "and-more"


def test_runs_of_separators_collapse():
    assert slugify("a  --  b") == "a-b"


def test_only_punctuation_gives_empty():
    assert slugify("?!") == ""
