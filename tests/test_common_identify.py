"""common/identify.py: the IDENTIFY body decoded as Go's encoding/json fills identifyDataV2
(NSQ v1.3's nsqd/client_v2.go)."""

import json

import pytest

from common.errors import ClientError
from common.identify import FIELDS, decode_identify

ZERO = {
    "client_id": "", "hostname": "", "user_agent": "", "feature_negotiation": False,
    "heartbeat_interval": 0, "output_buffer_size": 0, "output_buffer_timeout": 0,
    "tls_v1": False, "snappy": False, "deflate": False, "deflate_level": 0, "sample_rate": 0, "msg_timeout": 0,
}


def decode(body: bytes | str | dict) -> dict:
    if isinstance(body, dict):
        body = json.dumps(body)
    return decode_identify(body.encode() if isinstance(body, str) else body)


def assert_refused(body) -> None:
    with pytest.raises(ClientError) as info:
        decode(body)
    assert info.value.code == "E_BAD_BODY"
    assert str(info.value) == "E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert info.value.fatal


def test_known_fields_and_zero_values():
    assert set(FIELDS) == set(ZERO)
    assert decode(b"{}") == ZERO


def test_every_field_typed():
    data = {
        "client_id": "id", "hostname": "h.example", "user_agent": "pynsq/0.9.1", "feature_negotiation": True,
        "heartbeat_interval": -1, "output_buffer_size": 16384, "output_buffer_timeout": 250, "tls_v1": True,
        "snappy": True, "deflate": True, "deflate_level": 9, "sample_rate": 99, "msg_timeout": 60000,
    }
    assert decode(data) == data


def test_unknown_fields_are_ignored():
    body = {"client_id": "x", "long_id": "old", "short_id": 1, "nested": {"a": [1, {"b": None}]}, "z": 1.5e300}
    assert decode(body) == ZERO | {"client_id": "x"}


def test_null_is_the_zero_value():
    body = {"client_id": None, "heartbeat_interval": None, "snappy": None, "sample_rate": None}
    assert decode(body) == ZERO


def test_null_after_a_value_leaves_the_value_as_go_does():
    assert decode(b'{"snappy": true, "snappy": null}')["snappy"] is True


def test_duplicate_keys_last_one_wins():
    assert decode(b'{"msg_timeout": 1, "msg_timeout": 2}')["msg_timeout"] == 2


def test_keys_match_fields_case_insensitively():
    got = decode(b'{"Client_ID": "x", "HEARTBEAT_INTERVAL": 5000, "Snappy": true}')
    assert (got["client_id"], got["heartbeat_interval"], got["snappy"]) == ("x", 5000, True)


def test_case_insensitive_duplicate_last_one_wins():
    assert decode(b'{"snappy": true, "SNAPPY": false}')["snappy"] is False
    assert decode(b'{"SNAPPY": false, "snappy": true}')["snappy"] is True


def test_unicode_case_folding_of_long_s():
    assert decode('{"\u017fnappy": true}')["snappy"] is True  # U+017F folds to s in Go
    assert decode('{"\u0455nappy": true}')["snappy"] is False  # Cyrillic dze is just another key


@pytest.mark.parametrize("body", [
    b'{"client_id": 1}', b'{"client_id": true}', b'{"hostname": []}', b'{"user_agent": {}}',
    b'{"heartbeat_interval": "1000"}', b'{"heartbeat_interval": 1.5}', b'{"heartbeat_interval": 1.0}',
    b'{"heartbeat_interval": 1e3}', b'{"heartbeat_interval": true}', b'{"deflate_level": false}',
    b'{"feature_negotiation": 1}', b'{"feature_negotiation": "true"}', b'{"tls_v1": 0}', b'{"snappy": []}',
    b'{"sample_rate": 2147483648}', b'{"sample_rate": -2147483649}',
    b'{"msg_timeout": 9223372036854775808}', b'{"output_buffer_size": -9223372036854775809}',
    b'{"client_id": "ok", "unknown": 1, "msg_timeout": "60s"}',
])
def test_wrong_json_types_are_refused(body):
    assert_refused(body)


def test_integer_range_boundaries_are_accepted():
    got = decode(b'{"sample_rate": 2147483647, "msg_timeout": 9223372036854775807, '
                 b'"heartbeat_interval": -9223372036854775808}')
    assert (got["sample_rate"], got["msg_timeout"], got["heartbeat_interval"]) == (2**31 - 1, 2**63 - 1, -(2**63))
    assert decode(b'{"sample_rate": -2147483648}')["sample_rate"] == -(2**31)


@pytest.mark.parametrize("body", [b"[]", b"[{}]", b'"client_id"', b"1", b"true", b"false"])
def test_non_object_json_is_refused(body):
    assert_refused(body)


def test_top_level_null_is_all_zero_values_as_in_go():
    assert decode(b"null") == ZERO
    assert decode(b" null \n") == ZERO


@pytest.mark.parametrize("body", [
    b"", b" ", b"{", b"{'client_id': 'x'}", b'{"a": 1,}', b"{} x", b"{}{}", b'{"x": NaN}',
    b'{"x": Infinity}', b'{"x": -Infinity}', b"\xef\xbb\xbf{}", b'{"x": 01}', b"\xff",
    b'{"client_id": "a\x01b"}', b"[" * 100000, '{"snappy": true}'.encode("utf-16-le"),
    '{"snappy": true}'.encode("utf-16"),
])
def test_invalid_json_is_refused(body):
    assert_refused(body)


def test_whitespace_around_json_is_fine():
    assert decode(b' \t\r\n{"snappy" : true}\n') == ZERO | {"snappy": True}


def test_invalid_utf8_in_strings_becomes_replacement_characters():
    assert decode(b'{"client_id": "a\xffb\xe2\x82c"}')["client_id"] == "a\ufffdb\ufffd\ufffdc"


def test_escapes_in_strings():
    assert decode(b'{"hostname": "h\\u00e9\\n\\"q\\""}')["hostname"] == 'h\u00e9\n"q"'
