"""The IDENTIFY body (nsqd/client_v2.go identifyDataV2), decoded the way Go's json does."""

import json
from typing import Any

from .errors import ClientError

# field -> (type, zero value). Unknown fields are ignored, null means the zero value,
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


def _field_value(name: str, value: Any) -> Any:
    kind, zero = FIELDS[name]
    if value is None:
        return zero
    if kind is int:
        valid = type(value) is int and value in (_INT32_RANGE if name == "sample_rate" else _INT64_RANGE)
    else:
        valid = type(value) is kind
    if not valid:
        raise ValueError(name)
    return value


def decode_identify(body: bytes) -> dict[str, Any]:
    """Every known field, typed, with Go's zero value where absent."""
    try:
        raw = json.loads(body)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        data = {name: zero for name, (_, zero) in FIELDS.items()}
        for name, value in raw.items():
            if name in FIELDS:
                data[name] = _field_value(name, value)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from exc
    return data
