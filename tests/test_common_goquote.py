"""common/goquote.py: Go's strconv.Quote (%q), as NSQ uses it in error texts."""

import pytest

from common.goquote import go_quote


# Expected values are what Go's strconv.Quote returns for the same bytes.
@pytest.mark.parametrize("raw, quoted", [
    (b"", '""'),
    (b"abc", '"abc"'),
    (b" !#$%&'()*+,-./0123456789:;<=>?@[]^_`{|}~", '" !#$%&\'()*+,-./0123456789:;<=>?@[]^_`{|}~"'),
    (b'a"b', '"a\\"b"'),
    (b"a\\b", '"a\\\\b"'),
    (b"\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    (b"\x00", '"\\x00"'),
    (b"\x01\x1b\x1f", '"\\x01\\x1b\\x1f"'),
    (b"\x7f", '"\\x7f"'),
    (b"\xff", '"\\xff"'),
    (b"a\xfeb", '"a\\xfeb"'),
    (b"\xe2\x82", '"\\xe2\\x82"'),              # truncated 3-byte sequence: one escape per byte
    (b"\xe2\x82a", '"\\xe2\\x82a"'),
    (b"\xc0\x80", '"\\xc0\\x80"'),              # overlong encoding
    (b"\xed\xa0\x80", '"\\xed\\xa0\\x80"'),     # UTF-16 surrogate encoded in UTF-8
    (b"\x80", '"\\x80"'),                       # lone continuation byte
    ("é".encode(), '"é"'),
    ("日本語".encode(), '"日本語"'),
    ("😀".encode(), '"😀"'),
    ("\ufffd".encode(), '"\ufffd"'),            # a real U+FFFD is printable
    ("\u00a0".encode(), '"\\u00a0"'),           # no-break space is not printable in Go
    ("\u00ad".encode(), '"\\u00ad"'),           # soft hyphen
    ("\u0085".encode(), '"\\u0085"'),           # C1 control
    ("\u2028".encode(), '"\\u2028"'),
    ("\ufeff".encode(), '"\\ufeff"'),
    ("\ue000".encode(), '"\\ue000"'),           # private use
    ("\U000e0001".encode(), '"\\U000e0001"'),
    ("\U0010ffff".encode(), '"\\U0010ffff"'),
    ("a\u200bb".encode(), '"a\\u200bb"'),       # zero-width space (Cf)
])
def test_matches_go_strconv_quote(raw, quoted):
    assert go_quote(raw) == quoted


def test_str_input_is_quoted_like_its_utf8_bytes():
    assert go_quote("tab\there é") == '"tab\\there é"'


def test_str_with_surrogate_escaped_bytes_is_quoted_like_the_raw_bytes():
    text = b"t\xff".decode("utf-8", "surrogateescape")
    assert go_quote(text) == go_quote(b"t\xff") == '"t\\xff"'


def test_bytearray_and_memoryview():
    assert go_quote(bytearray(b"a\n")) == go_quote(memoryview(b"a\n")) == '"a\\n"'
