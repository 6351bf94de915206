"""nsq_to_nsq's JSON rules (apps/nsq_to_nsq/nsq_to_nsq.go): ``--require-json-field``,
``--require-json-value`` and ``--whitelist-json-field``, as pure functions over a message's
decoded JSON object.

* With a required field and no value, a message passes when the field is there.
* With a value too, a string field must equal it; a number field must equal it read as a
  number (when it reads as one); any other field does not pass. A message without the field
  does not pass, and asks for backoff (NSQ logs it as an error and requeues it).
* Whitelisted fields are kept (the others dropped) and the object is written anew as Go does
  (keys sorted, every number a float64 in Go's notation).

``message`` is the body as Go decodes it into ``interface{}`` (:func:`common.gojson.unmarshal_value`).
"""

from typing import NamedTuple

from common import gojson
from common.goflags import parse_float


class Verdict(NamedTuple):
    passes: bool
    backoff: bool


def _as_number(value: str) -> float | None:
    try:
        return parse_float(value)
    except ValueError:
        return None


def check(message: dict, field: str, value: str) -> Verdict:
    if not field:
        return Verdict(True, False)
    if field not in message:
        return Verdict(False, bool(value))
    if not value:
        return Verdict(True, False)
    found = message[field]
    if isinstance(found, str):
        return Verdict(found == value, False)
    number = _as_number(value)
    if number is not None and isinstance(found, (int, float)) and not isinstance(found, bool):
        return Verdict(float(found) == number, False)
    return Verdict(False, False)


def whitelisted(message: dict, fields: list[str]) -> bytes:
    return gojson.marshal_value({field: message[field] for field in fields if field in message})
