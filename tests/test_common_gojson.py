"""common/gojson.py: JSON as Go's encoding/json writes and reads it."""

import pytest

from common.gojson import decode_struct, dumps, go_float, marshal_value, unmarshal_value

FIELDS = {"name": str, "port": int, "on": bool}


def test_dumps_is_compact_utf8_and_html_safe():
    assert dumps({"b": 1, "a": [True, None, "x"]}) == b'{"b":1,"a":[true,null,"x"]}'
    assert dumps({"b": 1, "a": 2}, sort_keys=True) == b'{"a":2,"b":1}'
    assert dumps({"h": "é中"}) == '{"h":"é中"}'.encode()
    assert dumps({"<k>": "a&b\u2028\u2029"}) == b'{"\\u003ck\\u003e":"a\\u0026b\\u2028\\u2029"}'
    assert dumps("\n\t\"\\\x01") == b'"\\n\\t\\"\\\\\\u0001"'
    assert dumps("bad\udcff") == '"bad\ufffd"'.encode()  # not valid Unicode: U+FFFD, as Go


def test_decode_struct_like_go_unmarshal():
    assert decode_struct(b'{"name":"a","port":1,"on":true,"other":{"x":[1]}}', FIELDS) == {"name": "a", "port": 1, "on": True}
    assert decode_struct(b'{"NAME":"a","Port":2,"port":3}', FIELDS) == {"name": "a", "port": 3}
    assert decode_struct(b'{"name":null}', FIELDS) == {}
    assert decode_struct(b"null", FIELDS) == {}
    assert decode_struct(b' {} ', FIELDS) == {}
    # The Kelvin sign folds to k; invalid UTF-8 and lone surrogates become U+FFFD.
    assert decode_struct('{"\u212aey":"v"}'.encode(), {"key": str}) == {"key": "v"}
    assert decode_struct(b'{"name":"a\xffb"}', FIELDS) == {"name": "a\ufffdb"}
    assert decode_struct(b'{"name":"\\ud800"}', FIELDS) == {"name": "\ufffd"}


@pytest.mark.parametrize("body", [
    b"", b"{", b"[]", b'"x"', b"1", b'{"port":"1"}', b'{"port":1.0}', b'{"port":1e3}', b'{"port":true}',
    b'{"port":9223372036854775808}', b'{"on":1}', b'{"name":1}', b'{"x":NaN}', b'{"x":Infinity}', b"{} x",
    b"[" * 100000,
])
def test_decode_struct_errors(body):
    with pytest.raises(ValueError):
        decode_struct(body, FIELDS)


def test_int_range_is_go_int64():
    assert decode_struct(b'{"port":-9223372036854775808}', FIELDS) == {"port": -(2**63)}
    assert decode_struct(b'{"port":9223372036854775807}', FIELDS) == {"port": 2**63 - 1}


@pytest.mark.parametrize("value, text", [
    (1.0, "1"), (-0.0, "-0"), (0.0, "0"), (0.1, "0.1"), (1.5, "1.5"), (1e-6, "0.000001"), (1e-5, "0.00001"),
    (9.99e-7, "9.99e-7"), (1e-7, "1e-7"), (2.0**53, "9007199254740992"), (1e20, "100000000000000000000"),
    (12345678901234567890.0, "12345678901234567000"), (1e21, "1e+21"), (-2.5e-10, "-2.5e-10"), (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
])
def test_floats_as_go_writes_them(value, text):
    assert go_float(value) == text


def test_values_decoded_and_written_as_go_does_through_interface():
    decoded = unmarshal_value(b'{"b": [1, 2.50, {"z": -0, "y": "<x>"}], "a": 1, "a": 2, "c": "\xff"}')
    assert decoded == {"a": 2.0, "b": [1.0, 2.5, {"z": -0.0, "y": "<x>"}], "c": "\ufffd"}
    assert marshal_value(decoded) == b'{"a":2,"b":[1,2.5,{"y":"\\u003cx\\u003e","z":-0}],"c":"\xef\xbf\xbd"}'
    for refused in (b"NaN", b'{"a": Infinity}', b"1e400", b"{} x"):
        with pytest.raises(ValueError):
            unmarshal_value(refused)
