"""serving/v1.py: NSQ's V1 HTTP conventions (NSQ v1.3's internal/http_api/api_response.go)."""

import pytest

from serving.v1 import HTTPError, error_parts, ok_parts, parse_query, text_parts, v1_error, v1_ok

V1 = ("X-NSQ-Content-Type", "nsq; version=1.0")
JSON = ("Content-Type", "application/json; charset=utf-8")
TEXT = ("Content-Type", "text/plain; charset=utf-8")


def test_parse_query_like_go():
    assert parse_query("topic=a&topic=b&channel=c+d&x=%41&empty=&bare") == {
        "topic": ["a", "b"], "channel": ["c d"], "x": ["A"], "empty": [""], "bare": [""]}
    assert parse_query("") == {}
    assert parse_query("&&a=1&") == {"a": ["1"]}


@pytest.mark.parametrize("raw", ["a=1;b=2", "a=%zz", "a=%4", "%=1", "a=1&b=%"])
def test_parse_query_errors_are_invalid_request(raw):
    with pytest.raises(HTTPError) as info:
        parse_query(raw)
    assert (info.value.status, info.value.text) == (400, "INVALID_REQUEST")


def test_v1_bodies_and_headers():
    assert ok_parts() == (200, b"", [V1])
    assert ok_parts("OK") == (200, b"OK", [V1, TEXT])
    assert ok_parts("") == (200, b"", [V1])
    assert ok_parts({"b": "<x>", "a": 1}) == (200, b'{"b":"\\u003cx\\u003e","a":1}', [V1, JSON])
    assert ok_parts({"b": 1, "a": 2}, sort_keys=True)[1] == b'{"a":2,"b":1}'
    assert error_parts(404, "TOPIC_NOT_FOUND") == (404, b'{"message":"TOPIC_NOT_FOUND"}', [V1, JSON])
    assert text_parts(200, "OK") == (200, b"OK", [TEXT])
    response = v1_error(400, "MISSING_ARG_TOPIC")
    assert (response.status, response.body, response.headers) == (400, b'{"message":"MISSING_ARG_TOPIC"}', [V1, JSON])
    assert v1_ok({"version": "1.3.0"}).body == b'{"version":"1.3.0"}'
