"""The IDENTIFY body (nsqd/client_v2.go identifyDataV2), decoded the way Go's json does."""

import json
from typing import Any

from .errors import ClientError

# field -> (type, zero value). Unknown fields are ignored, null leaves a field as it is,
# and a value of the wrong JSON type fails the whole decode, as encoding/json does.
FIELDS: dict[str, tuple[type, Any]] = {
    "client_id": (str, ""),
    "hostname": (str, ""),
    "user_agent": (str, ""),
    "feature_negotiation": (bool, False),
    "heartbeat_interval": (int, 0),
    "output_buffer_size": (int, 0),
    "output_buffer_timeout": (int, 0),
    "tls_v1": (bool, False),
    "snappy": (bool, False),
    "deflate": (bool, False),
    "deflate_level": (int, 0),
    "sample_rate": (int, 0),
    "msg_timeout": (int, 0),
}

_INT32_RANGE = range(-(2**31), 2**31)
_INT64_RANGE = range(-(2**63), 2**63)
# The two non-ASCII runes Unicode case-folds onto ASCII letters used in field names.
_GO_FOLDS_TO_ASCII = str.maketrans({"\u212a": "k", "\u017f": "s"})  # Kelvin sign, long s
# surrogateescape gives each undecodable byte its own code point; Go gives each one a U+FFFD.
_INVALID_BYTES_TO_FFFD = dict.fromkeys(range(0xDC80, 0xDD00), "\ufffd")


def _field_name(key: str) -> str | None:
    """The field a JSON key sets: Go matches keys to fields case-insensitively."""
    if key in FIELDS:
        return key
    folded = key.translate(_GO_FOLDS_TO_ASCII)
    if folded.isascii() and folded.lower() in FIELDS:
        return folded.lower()
    return None


def _field_value(name: str, value: Any) -> Any:
    kind, _ = FIELDS[name]
    if kind is int:
        valid = type(value) is int and value in (_INT32_RANGE if name == "sample_rate" else _INT64_RANGE)
    else:
        valid = type(value) is kind
    if not valid:
        raise ValueError(name)
    return value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse(body: bytes) -> Any:
    """JSON as Go reads it: each invalid UTF-8 byte becomes U+FFFD, no NaN or Infinity.

    Objects come back as tuples of (key, value) pairs, in order and with duplicates,
    because Go assigns every matching key in turn and the last one wins.
    """
    text = body.decode("utf-8", "surrogateescape").translate(_INVALID_BYTES_TO_FFFD)
    return json.loads(text, object_pairs_hook=tuple, parse_constant=_reject_constant)


def decode_identify(body: bytes) -> dict[str, Any]:
    """Every known field, typed, with Go's zero value where absent."""
    data = {name: zero for name, (_, zero) in FIELDS.items()}
    try:
        pairs = _parse(body)
        if pairs is None:  # Go: unmarshalling null into a struct changes nothing
            return data
        if not isinstance(pairs, tuple):
            raise ValueError("not an object")
        for key, value in pairs:
            name = _field_name(key)
            if name is not None and value is not None:
                data[name] = _field_value(name, value)
    except (ValueError, RecursionError) as exc:
        raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from exc
    return data
