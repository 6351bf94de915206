"""NSQ's V1 HTTP API conventions, shared by the daemons (internal/http_api).

* Every V1 answer carries ``X-NSQ-Content-Type: nsq; version=1.0``.
* Success: text as is, ``None`` as an empty body, anything else as JSON (Go's
  json.Marshal, so HTML-safe and UTF-8) with ``Content-Type: application/json``.
* Error: ``{"message":"<TEXT>"}`` with its status; raise :class:`HTTPError` to get one.
* Parameters come from the query string, parsed with Go's url.ParseQuery rules
  (a ``;`` or a bad %-escape is 400 ``INVALID_REQUEST``).

The helpers return plain ``(status, body, headers)`` parts so that any server or
framework can wrap them; :func:`v1_ok` and :func:`v1_error` wrap them for serving.http.
"""

from urllib.parse import unquote_plus

from common import gojson

from .http import Response

V1_HEADER = ("X-NSQ-Content-Type", "nsq; version=1.0")
JSON_TYPE = ("Content-Type", "application/json; charset=utf-8")
TEXT_TYPE = ("Content-Type", "text/plain; charset=utf-8")
BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}

Headers = list[tuple[str, str]]


class HTTPError(Exception):
    """An API error: answered with ``status`` and ``{"message": text}``."""

    def __init__(self, status: int, text: str):
        super().__init__(status, text)
        self.status = status
        self.text = text


def parse_query(raw: str) -> dict[str, list[str]]:
    """Go's url.ParseQuery: ``;`` and bad %-escapes are errors (-> 400 INVALID_REQUEST)."""
    values: dict[str, list[str]] = {}
    for part in raw.split("&"):
        if not part:
            continue
        if ";" in part:
            raise HTTPError(400, "INVALID_REQUEST")
        key, _, value = part.partition("=")
        values.setdefault(_unescape(key), []).append(_unescape(value))
    return values


def _unescape(text: str) -> str:
    if "%" not in text and "+" not in text:
        return text
    pos = text.find("%")
    while pos >= 0:
        if len(text) < pos + 3 or not all(c in "0123456789abcdefABCDEF" for c in text[pos + 1:pos + 3]):
            raise HTTPError(400, "INVALID_REQUEST")
        pos = text.find("%", pos + 3)
    return unquote_plus(text, errors="surrogateescape")


def ok_parts(data=None, sort_keys: bool = False) -> tuple[int, bytes, Headers]:
    """A V1 success: nothing, text, or JSON (``sort_keys`` where Go marshals a map). Go's net/http
    gives an empty body no Content-Type."""
    if data is None or data in (b"", ""):
        return 200, b"", [V1_HEADER]
    if isinstance(data, (bytes, str)):
        # no type is set for text: Go's server sniffs one from the body, and finds none in nothing
        return 200, data.encode() if isinstance(data, str) else data, [V1_HEADER, TEXT_TYPE] if data else [V1_HEADER]
    return 200, gojson.dumps(data, sort_keys=sort_keys), [V1_HEADER, JSON_TYPE]


def error_parts(status: int, text: str) -> tuple[int, bytes, Headers]:
    return status, gojson.dumps({"message": text}), [V1_HEADER, JSON_TYPE]


def text_parts(status: int, text: str) -> tuple[int, bytes, Headers]:
    """http_api.PlainText (``/ping``): no V1 header, Go's sniffed text type."""
    return status, text.encode(), [TEXT_TYPE]


def v1_ok(data=None) -> Response:
    return Response(*ok_parts(data))


def v1_error(status: int, text: str) -> Response:
    return Response(*error_parts(status, text))
