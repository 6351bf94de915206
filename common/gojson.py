"""JSON the way NSQ's Go code writes and reads it (encoding/json).

Writing (``json.Marshal``): compact, UTF-8 (not ``\\uXXXX`` escapes), and HTML-safe:
``<``, ``>``, ``&``, U+2028 and U+2029 are escaped; text that is not valid Unicode is
written as U+FFFD. Key order is the caller's: Go writes struct fields in declaration
order and map keys sorted, so pass ``sort_keys=True`` where Go marshals a map.

Reading (``json.Unmarshal`` into a struct): keys match fields exactly or, failing
that, case-insensitively; unknown keys are ignored; ``null`` leaves a field alone; the
last duplicate wins; a value of the wrong JSON type, a fractional number for an int
field or an int out of range fails the whole decode. Invalid UTF-8 and lone
surrogates in strings become U+FFFD.
"""

import json
import re
from typing import Any

_HTML_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
_SURROGATES = re.compile("[\ud800-\udfff]")
# surrogateescape gives each undecodable byte its own code point; Go gives each one a U+FFFD.
_INVALID_BYTES_TO_FFFD = dict.fromkeys(range(0xDC80, 0xDD00), "\ufffd")
# The two non-ASCII runes Unicode case-folds onto ASCII letters (Go's foldName matches them).
_GO_FOLDS_TO_ASCII = str.maketrans({"\u212a": "k", "\u017f": "s"})
_INT64 = range(-(2**63), 2**63)

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_sorted_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def dumps(data: Any, sort_keys: bool = False) -> bytes:
    """``json.Marshal(data)``."""
    text = (_sorted_encoder if sort_keys else _encoder).encode(data)
    for char, escape in _HTML_UNSAFE:
        if char in text:
            text = text.replace(char, escape)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text).encode("utf-8")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse(body: bytes) -> Any:
    """Objects come back as tuples of (key, value) pairs, in order and with duplicates."""
    text = body.decode("utf-8", "surrogateescape").translate(_INVALID_BYTES_TO_FFFD)
    return json.loads(text, object_pairs_hook=tuple, parse_constant=_reject_constant)


def _field_name(key: str, fields: dict[str, type]) -> str | None:
    if key in fields:
        return key
    folded = key.translate(_GO_FOLDS_TO_ASCII)
    if folded.isascii():
        folded = folded.lower()
        for name in fields:
            if name.lower() == folded:
                return name
    return None


def _field_value(name: str, kind: type, value: Any) -> Any:
    if kind is int:
        if type(value) is not int or value not in _INT64:
            raise ValueError(f"field {name}: want an integer")
        return value
    if type(value) is not kind:
        raise ValueError(f"field {name}: want {kind.__name__}")
    if kind is str and _SURROGATES.search(value):
        value = _SURROGATES.sub("\ufffd", value)
    return value


def decode_struct(body: bytes, fields: dict[str, type]) -> dict[str, Any]:
    """The fields ``body`` sets (name -> value), as Go fills a struct; ValueError if Go
    would fail. ``fields`` maps each JSON field name to str, int or bool."""
    try:
        pairs = _parse(body)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    if pairs is None:  # unmarshalling null into a struct changes nothing
        return {}
    if not isinstance(pairs, tuple):
        raise ValueError("not a JSON object")
    values = {}
    for key, value in pairs:
        name = _field_name(key, fields)
        if name is not None and value is not None:
            values[name] = _field_value(name, fields[name], value)
    return values
