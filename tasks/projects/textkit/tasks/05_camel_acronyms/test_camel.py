from textkit import camel_to_snake


def test_leading_acronym():
    assert camel_to_snake("HTTPServer") == "http_server"


def test_inner_acronym():
    assert camel_to_snake("getHTTPResponse") == "get_http_response"


def test_plain_camel_case():
    assert camel_to_snake("ParseConfig") == "parse_config"


def test_already_lower():
    assert camel_to_snake("value") == "value"
