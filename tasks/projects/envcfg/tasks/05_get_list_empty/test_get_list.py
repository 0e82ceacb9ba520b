from envcfg import load


def test_unset_key_is_empty_list():
    assert load("").get_list("HOSTS") == []


def test_items_are_stripped():
    assert load("HOSTS=a, b ,c").get_list("HOSTS") == ["a", "b", "c"]


def test_empty_items_skipped():
    assert load("HOSTS=a,,b").get_list("HOSTS") == ["a", "b"]


def test_custom_separator():
    assert load("PATHS=/a:/b").get_list("PATHS", sep=":") == ["/a", "/b"]
