"""JSON the way NSQ's Go code writes and reads it (encoding/json).

Writing (``json.Marshal``): compact, UTF-8 (not ``\\uXXXX`` escapes), and HTML-safe:
``<``, ``>``, ``&``, U+2028 and U+2029 are escaped; text that is not valid Unicode is
written as U+FFFD. Key order is the caller's: Go writes struct fields in declaration
order and map keys sorted, so pass ``sort_keys=True`` where Go marshals a map.

Numbers Go decoded into ``interface{}`` are float64s, written back its way (:func:`marshal_value`).

Reading (``json.Unmarshal`` into a struct): keys match fields exactly or, failing
that, case-insensitively; unknown keys are ignored; ``null`` leaves a field alone; the
last duplicate wins; a value of the wrong JSON type, a fractional number for an int
field or an int out of range fails the whole decode, with the text of Go's
UnmarshalTypeError. Invalid UTF-8 and lone surrogates in strings become U+FFFD.
"""

import decimal
import json
import math
import re
from typing import Any

_HTML_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
_SURROGATES = re.compile("[\ud800-\udfff]")
# surrogateescape gives each undecodable byte its own code point; Go gives each one a U+FFFD.
_INVALID_BYTES_TO_FFFD = dict.fromkeys(range(0xDC80, 0xDD00), "\ufffd")
# The two non-ASCII runes Unicode case-folds onto ASCII letters (Go's foldName matches them).
_GO_FOLDS_TO_ASCII = str.maketrans({"\u212a": "k", "\u017f": "s"})
_INT64 = range(-(2**63), 2**63)
_GO_TYPES = {str: "string", int: "int", bool: "bool"}

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


def go_float(value: float) -> str:
    """How encoding/json writes a float64: the shortest digits that read back the same, positional
    from 1e-6 up to 1e21 (``100000000000000000000``, ``0.00001``, ``-0``), else with an exponent
    of at least one digit (``1e-7``, ``1e+21``)."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)
    if 1e-6 <= abs(value) < 1e21:
        return format(decimal.Decimal(shortest).normalize(), "f")
    return re.sub(r"e-0(\d)$", r"e-\1", shortest)  # repr's exponent form is strconv's 'e', -1


def marshal_value(value: Any) -> bytes:
    """``json.Marshal`` of what :func:`unmarshal_value` gives: objects with their keys sorted (Go's
    maps), every number a float64 written as Go writes it."""
    if isinstance(value, dict):
        return b"{" + b",".join(dumps(key) + b":" + marshal_value(value[key]) for key in sorted(value)) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(marshal_value(item) for item in value) + b"]"
    if isinstance(value, float):
        return go_float(value).encode()
    return dumps(value)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return value


def unmarshal_value(body: bytes) -> Any:
    """``json.Unmarshal`` into an ``interface{}``: objects as dicts (the last duplicate key wins),
    every number a float64 (ValueError past its range), invalid UTF-8 as U+FFFD; ValueError for
    what Go refuses (NaN, Infinity, trailing data)."""
    text = body.decode("utf-8", "surrogateescape").translate(_INVALID_BYTES_TO_FFFD)
    return json.loads(text, parse_int=_finite, parse_float=_finite, parse_constant=_reject_constant)


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


def _json_kind(value: Any) -> str:
    """What Go's decoder calls a JSON value it cannot store (UnmarshalTypeError.Value)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", tuple: "object"}[type(value)]


def struct_type(fields: dict[str, type]) -> str:
    """The reflect name of the anonymous struct NSQ decodes into, e.g. ``struct { Topic string
    "json:\\"topic\\"" }``: Go's errors name it."""
    declared = "; ".join(f'{name.capitalize()} {_GO_TYPES[kind]} "json:\\"{name}\\""' for name, kind in fields.items())
    return f"struct {{ {declared} }}"


def _type_error(name: str, kind: type, value: Any) -> ValueError:
    """Go's UnmarshalTypeError for a field of an anonymous struct (its struct name is empty); a number
    that does not fit an int field is named with its value."""
    found = _json_kind(value)
    if kind is int and found == "number":
        found = f"number {value}"
    return ValueError(f"json: cannot unmarshal {found} into Go struct field .{name} of type {_GO_TYPES[kind]}")


def _field_value(name: str, kind: type, value: Any) -> Any:
    if kind is int:
        if type(value) is not int or value not in _INT64:
            raise _type_error(name, kind, value)
        return value
    if type(value) is not kind:
        raise _type_error(name, kind, value)
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
