from envcfg import parse_line


def test_quoted_value_with_comment():
    assert parse_line('GREETING="hello world"  # shown at login') == ("GREETING", "hello world")


def test_hash_inside_quotes_kept():
    assert parse_line("TAG='a # b' # note") == ("TAG", "a # b")


def test_plain_quoted_value():
    assert parse_line('NAME="x y"') == ("NAME", "x y")


def test_unquoted_comment_stripped():
    assert parse_line("PORT=80 # http") == ("PORT", "80")


def test_export_prefix():
    assert parse_line("export HOME_DIR=/srv") == ("HOME_DIR", "/srv")
