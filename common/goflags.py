"""Command-line flags and config-file values the way NSQ's Go binaries read them.

Go's ``flag`` package syntax (``-name=value``, ``--name value``, bare ``-bool``), Go
duration strings (``1m30s``, ``250ms``), and mreiferson/go-options resolution:
a flag given on the command line wins over the TOML config file, which wins over the
default. Config keys are flag names with ``-`` turned into ``_`` unless a flag names
another key. Pure functions: the caller reads the files and prints the errors.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from .goquote import go_quote

_NS_PER_UNIT = {
    "ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_MAX_DURATION_NS = 2**63  # Go's bound on the magnitude; +2**63 itself overflows
_GO_INT = re.compile(r"[+-]?[0-9a-zA-Z_]+")


class FlagError(ValueError):
    """A flag or config value that cannot be used; the message says which and why."""


def _time_quote(text: str) -> str:
    """How Go's time package quotes input in its errors: non-ASCII and control bytes as \\xNN."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        if byte < 0x20 or byte >= 0x80:
            out.append(f"\\x{byte:02x}")
        else:
            out.append("\\" + char if char in '"\\' else char)
    return '"' + "".join(out) + '"'


def parse_duration_ns(text: str) -> int:
    """Go's time.ParseDuration: ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` or ``0``, in nanoseconds."""
    invalid = FlagError(f"time: invalid duration {_time_quote(text)}")
    negative, body = text.startswith("-"), text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return 0
    if not body:
        raise invalid
    total, pos = 0, 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3)
        if not whole and not fraction:
            raise invalid
        if not unit:
            raise FlagError(f"time: missing unit in duration {_time_quote(text)}")
        if unit not in _NS_PER_UNIT:
            raise FlagError(f"time: unknown unit {_time_quote(unit)} in duration {_time_quote(text)}")
        scale = _NS_PER_UNIT[unit]
        total += int(whole or "0") * scale + int(fraction or "0") * scale // 10 ** len(fraction)
        if total > _MAX_DURATION_NS:
            raise invalid
        pos = match.end()
    if not negative and total == _MAX_DURATION_NS:
        raise invalid
    return -total if negative else total


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, returning seconds."""
    return parse_duration_ns(text) / 1e9


def _decimal(value: int, scale: int) -> str:
    """``value / scale`` written out exactly, trailing zeros dropped (Go's fmtFrac)."""
    whole, fraction = divmod(value, scale)
    digits = str(fraction).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(seconds: float) -> str:
    """Go's Duration.String(): ``1h2m3.5s``, ``250ms``, ``1.5µs``, ``0s``."""
    ns = round(seconds * 1e9)
    sign, ns = ("-" if ns < 0 else ""), abs(ns)
    if ns == 0:
        return "0s"
    if ns < 10**9:
        unit, scale = ("ms", 10**6) if ns >= 10**6 else ("µs", 10**3) if ns >= 10**3 else ("ns", 1)
        return sign + _decimal(ns, scale) + unit
    minutes, rest = divmod(ns, 60 * 10**9)
    hours, minutes = divmod(minutes, 60)
    out = f"{hours}h{minutes}m" if hours else f"{minutes}m" if minutes else ""
    return sign + out + _decimal(rest, 10**9) + "s"


def parse_int(text: str) -> int:
    """Go's strconv.ParseInt(text, 0, 64), as flag.Int parses: ``0x1f``, ``0b1``, ``0o17``,
    ``017`` (a leading 0 means octal), ``1_000``."""
    if not _GO_INT.fullmatch(text):
        raise ValueError("parse error")
    sign = "-" if text[0] == "-" else ""
    digits = text[1:] if text[0] in "+-" else text
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "bBoOxX":
        digits = "0o" + digits[1:]
    try:
        value = int(sign + digits, 0)
    except ValueError:
        raise ValueError("parse error") from None
    if not -(2**63) <= value < 2**63:
        raise ValueError("value out of range")
    return value


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise FlagError(f'invalid boolean value "{text}"')


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str  # "str", "int", "bool", "duration", "list" (repeatable string), "float_list"
    default: Any
    help: str
    cfg_key: str = ""
    duration_int_unit: float = 1e-3  # go-options reads a bare integer as this many seconds

    @property
    def key(self) -> str:
        return self.cfg_key or self.name.replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")


def _parse_floats(text: str) -> list[float]:
    """A comma-separated list of floats (nsq's app.FloatArray, go-options' []float64)."""
    return [float(part) for part in text.split(",")]


def _convert(flag: Flag, text: str) -> Any:
    """A command-line value as Go's flag.Value.Set reads it."""
    try:
        if flag.kind in ("str", "list"):
            return text
        if flag.kind == "int":
            return parse_int(text)
        if flag.kind == "bool":
            return parse_bool(text)
        if flag.kind == "duration":
            return parse_duration(text)
        if flag.kind == "float_list":
            return _parse_floats(text)
    except ValueError as exc:
        raise FlagError(f"invalid value {go_quote(text)} for flag -{flag.name}: {exc}") from exc
    raise FlagError(f"flag -{flag.name} has unknown kind {flag.kind}")


def _split_flag(arg: str) -> tuple[str, str | None]:
    """``-name``, ``--name``, ``-name=value`` as (name, value or None), Go's flag syntax."""
    name = arg[2:] if arg.startswith("--") else arg[1:]
    if not name or name[0] in "-=":
        raise FlagError(f"bad flag syntax: {arg}")
    name, equals, value = name.partition("=")
    return name, value if equals else None


def parse_args(flags: list[Flag], argv: list[str]) -> dict[str, Any]:
    """The flags given on the command line, by attribute name (Go flag syntax)."""
    by_name = {flag.name: flag for flag in flags}
    given: dict[str, Any] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            raise FlagError(f"unexpected argument {arg!r}: nsq daemons take only flags")
        name, value = _split_flag(arg)
        flag = by_name.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if value is None and flag.kind == "bool":
            value = "true"
        elif value is None:
            if not args:
                raise FlagError(f"flag needs an argument: -{name}")
            value = args.pop(0)
        converted = _convert(flag, value)
        if flag.kind == "list":
            given.setdefault(flag.attr, []).append(converted)
        elif flag.kind == "float_list":
            given[flag.attr] = sorted(given.get(flag.attr, []) + converted, reverse=True)  # app.FloatArray: descending
        else:
            given[flag.attr] = converted
    if args:
        raise FlagError(f"unexpected argument {args[0]!r}: nsq daemons take only flags")
    return given


def _from_config(flag: Flag, value: Any) -> Any:
    """A TOML value coerced as go-options does for the flag's type."""
    where = f"config key {flag.key!r}"
    try:
        if flag.kind == "duration":
            if isinstance(value, int) and not isinstance(value, bool):
                return value * flag.duration_int_unit
            if isinstance(value, str):
                if re.fullmatch(r"[0-9]+", value):
                    return int(value) * flag.duration_int_unit
                return parse_duration(value)
        elif flag.kind == "int":
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value):
                return int(value)
        elif flag.kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str):
                return parse_bool(value)
        elif flag.kind == "str":
            if isinstance(value, str):
                return value
        elif flag.kind == "list":
            if isinstance(value, list) and all(isinstance(item, str) for item in value):
                return list(value)
            if isinstance(value, str):
                return value.split(",")
        elif flag.kind == "float_list":
            if isinstance(value, list) and all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in value):
                return [float(item) for item in value]
            if isinstance(value, str):
                return _parse_floats(value)
    except ValueError as exc:
        raise FlagError(f"{where}: {exc}") from exc
    raise FlagError(f"{where}: invalid value {value!r} for a {flag.kind} option")


@dataclass
class Resolved:
    values: dict[str, Any]
    unknown_config_keys: list[str] = field(default_factory=list)


def resolve(flags: list[Flag], given: dict[str, Any], config: dict[str, Any]) -> Resolved:
    """Command line > config file > default, for every flag."""
    values: dict[str, Any] = {}
    known_keys = set()
    for flag in flags:
        known_keys.add(flag.key)
        if flag.attr in given:
            values[flag.attr] = given[flag.attr]
        elif flag.key in config:
            values[flag.attr] = _from_config(flag, config[flag.key])
        else:
            default = flag.default
            values[flag.attr] = list(default) if isinstance(default, list) else default
    unknown = sorted(key for key in config if key not in known_keys)
    return Resolved(values, unknown)


def usage(program: str, flags: list[Flag]) -> str:
    lines = [f"Usage of {program}:"]
    for flag in flags:
        kind = {"bool": "", "list": " value", "float_list": " value", "duration": " duration",
                "int": " int", "str": " string"}[flag.kind]
        lines.append(f"  -{flag.name}{kind}")
        default = flag.default
        if flag.kind == "duration":
            default = format_duration(default)
        shown = f" (default {go_quote(default)})" if flag.kind == "str" and default else (
            f" (default {default})" if default not in ("", [], False, None) else "")
        lines.append(f"    \t{flag.help}{shown}")
    return "\n".join(lines)
