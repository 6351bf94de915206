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

_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class FlagError(ValueError):
    """A flag or config value that cannot be used; the message says which and why."""


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, returning seconds."""
    raw = text.strip()
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if body == "0":
        return 0.0
    if not body:
        raise FlagError(f'time: invalid duration "{text}"')
    total, pos = 0.0, 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            if re.fullmatch(r"[\d.]+", body[pos:]):
                raise FlagError(f'time: missing unit in duration "{text}"')
            raise FlagError(f'time: invalid duration "{text}"')
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Go's Duration.String() for the values flags use (help text, /config answers)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
            if seconds >= scale:
                return f"{seconds / scale:g}{unit}"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{secs:g}s"


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


def _convert(flag: Flag, text: str) -> Any:
    try:
        if flag.kind == "str":
            return text
        if flag.kind == "int":
            return int(text, 10)
        if flag.kind == "bool":
            return parse_bool(text)
        if flag.kind == "duration":
            return parse_duration(text)
        if flag.kind == "float_list":
            return [float(part) for part in text.split(",") if part]
    except ValueError as exc:
        raise FlagError(f'invalid value "{text}" for flag -{flag.name}: {exc}') from exc
    raise FlagError(f"flag -{flag.name} has unknown kind {flag.kind}")


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
        name, has_value, value = arg.lstrip("-").partition("=")
        flag = by_name.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.kind == "bool" and not has_value:
            value = "true"
        elif not has_value:
            if not args:
                raise FlagError(f"flag needs an argument: -{name}")
            value = args.pop(0)
        converted = _convert(flag, value)
        if flag.kind in ("list", "float_list"):
            items = [value] if flag.kind == "list" else converted
            given.setdefault(flag.attr, []).extend(items)
        else:
            given[flag.attr] = converted
    if args:
        raise FlagError(f"unexpected argument {args[0]!r}: nsq daemons take only flags")
    return given


def _from_config(flag: Flag, value: Any) -> Any:
    """A TOML value coerced as go-options does for the flag's type."""
    where = f"config key {flag.key!r}"
    if flag.kind == "duration":
        if isinstance(value, bool):
            raise FlagError(f"{where}: expected a duration, got {value!r}")
        if isinstance(value, int):
            return value * flag.duration_int_unit
        if isinstance(value, str):
            if value.isdigit():
                return int(value) * flag.duration_int_unit
            try:
                return parse_duration(value)
            except FlagError as exc:
                raise FlagError(f"{where}: {exc}") from exc
    elif flag.kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            return int(value)
    elif flag.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return parse_bool(value)
            except FlagError as exc:
                raise FlagError(f"{where}: {exc}") from exc
    elif flag.kind == "str":
        if isinstance(value, str):
            return value
    elif flag.kind == "list":
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return list(value)
        if isinstance(value, str):
            return [value]
    elif flag.kind == "float_list":
        if isinstance(value, list) and all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in value):
            return [float(item) for item in value]
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
        shown = f" (default {default!r})" if flag.kind == "str" and default else (
            f" (default {default})" if default not in ("", [], False, None) else "")
        lines.append(f"    \t{flag.help}{shown}")
    return "\n".join(lines)
