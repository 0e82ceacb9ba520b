from envcfg import load


def test_calls_are_independent():
    load("A=1")
    assert load("B=2").keys() == ["B"]


def test_defaults_not_modified():
    base = {"LEVEL": "info"}
    cfg = load("X=1", defaults=base)
    assert base == {"LEVEL": "info"}
    assert cfg.keys() == ["LEVEL", "X"]


def test_text_overrides_default():
    assert load("LEVEL=debug", defaults={"LEVEL": "info"}).get("LEVEL") == "debug"


def test_blank_and_comment_lines():
    assert load("\n# c\nK=v\n").keys() == ["K"]
