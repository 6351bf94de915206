"""Command-line flags and config-file values the way NSQ's Go programs read them.

Go's ``flag`` package: syntax (``-name=value``, ``--name value``, bare ``-bool``; parsing stops at
``--`` or at the first argument that is not a flag), values (Go durations such as ``1m30s``, ints
in any base ``strconv`` reads, ``strconv.ParseBool`` booleans), error texts (``flag provided but
not defined: -x``, ``invalid value "x" for flag -n: parse error``), ``-h``/``-help`` when not
defined (:class:`HelpRequested`) and the usage ``PrintDefaults`` writes. Then mreiferson/go-options'
resolution, for the daemons: a flag given on the command line wins over the TOML config file, which
wins over the default; config keys are flag names with ``-`` turned into ``_`` unless a flag names
another key. Pure functions: the caller reads the files, prints and exits (the daemons:
serving/daemon.py; the utilities: nsqutils/flagset.py).
"""

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .goquote import go_quote

_NS_PER_UNIT = {
    "ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_MAX_DURATION_NS = 2**63  # Go's bound on the magnitude; +2**63 itself overflows
_GO_INT = re.compile(r"[+-]?[0-9a-zA-Z_]+")
_GO_FLOAT = re.compile(r"[+-]?(inf|infinity|nan|(\d+\.?\d*|\.\d+)(e[+-]?\d+)?)", re.IGNORECASE)
_TYPE_NAMES = {"str": "string", "int": "int", "bool": "", "duration": "duration", "float": "float"}


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


def parse_float(text: str) -> float:
    """Go's strconv.ParseFloat(text, 64)."""
    if not _GO_FLOAT.fullmatch(text):
        raise ValueError("parse error")
    value = float(text)
    if math.isinf(value) and "inf" not in text.lower():
        raise ValueError("value out of range")
    return value


def _parse_count(text: str) -> int:
    """nsq_stat's numValue: strconv.ParseInt(text, 10, 32), its error as Go words it."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def _parse_floats(text: str) -> list[float]:
    """A comma-separated list of floats (nsq's app.FloatArray, whose Set ends the program on a bad
    one with its own words, not the flag package's)."""
    values = []
    for part in text.split(","):
        try:
            values.append(parse_float(part))
        except ValueError:
            raise FlagError(f"Could not parse: {part}") from None
    return values


@dataclass(frozen=True)
class GoValue:
    """What makes a string flag one of NSQ's own flag.Values (lg.LogLevel, nsqd's tlsRequiredOption):
    ``check`` is its Set, raising ValueError in NSQ's words; ``shown_default`` is its default as
    its String() gives it in the usage (nothing shown when empty); an ``is_bool`` Value (Go's
    IsBoolFlag) may be given bare, meaning ``true``, and shows no type in the usage."""
    check: Callable[[str], Any]
    shown_default: str = ""
    is_bool: bool = False


@dataclass(frozen=True)
class Flag:
    """One flag. Kinds: ``str``, ``int``, ``bool``, ``duration`` (seconds), ``float``, ``list`` (a
    repeatable string, nsq's app.StringArray), ``float_list`` (floats, comma-separated or repeated,
    kept in descending order: nsq's app.FloatArray), ``count`` (nsq_stat's numValue: a decimal int32,
    None when not given) and ``value`` (a Go flag.Value: ``default`` makes an empty one, such as
    nsqclient.Config, and each occurrence calls its ``set_flag(text)``, which raises ValueError)."""
    name: str
    kind: str
    default: Any
    help: str
    cfg_key: str = ""
    duration_int_unit: float = 1e-3  # go-options reads a bare integer as this many seconds
    go_value: GoValue | None = None  # a ``str`` flag NSQ defines as a flag.Value of its own

    @property
    def key(self) -> str:
        return self.cfg_key or self.name.replace("-", "_")

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    def initial(self) -> Any:
        """The value before the command line and the config file: a copy of the default (for a
        ``value`` flag, a new empty Value)."""
        if self.kind == "value":
            return self.default()
        return list(self.default) if isinstance(self.default, list) else self.default


class HelpRequested(Exception):
    """``-h`` or ``-help`` where no such flag is defined (Go's flag.ErrHelp): print the usage."""


def _go_parse_error(convert):
    """A conversion whose ValueError reads as Go's flag package says it: ``parse error``."""
    def converted(text: str):
        try:
            return convert(text)
        except ValueError:
            raise ValueError("parse error") from None
    return converted


_CONVERT = {
    "str": str, "list": str, "int": parse_int, "float": parse_float, "duration": _go_parse_error(parse_duration),
    "float_list": _parse_floats, "count": _parse_count,
}


def _set(flag: Flag, given: dict[str, Any], text: str) -> None:
    """One occurrence of a flag that takes a value, as its Go flag.Value.Set does."""
    try:
        if flag.kind == "value":
            given.setdefault(flag.attr, flag.initial()).set_flag(text)
            return
        value = _CONVERT[flag.kind](text)
        if flag.go_value:
            flag.go_value.check(text)
    except FlagError:
        raise
    except ValueError as exc:
        raise FlagError(f"invalid value {go_quote(text)} for flag -{flag.name}: {exc}") from exc
    if flag.kind == "list":
        given.setdefault(flag.attr, []).append(value)
    elif flag.kind == "float_list":
        given[flag.attr] = sorted(given.get(flag.attr, []) + value, reverse=True)
    else:
        given[flag.attr] = value


def _set_bool_value(flag: Flag, given: dict[str, Any], text: str | None) -> None:
    """A Value that is a bool flag: bare means ``true``; its Set's error, as Go's flag package words it."""
    try:
        flag.go_value.check("true" if text is None else text)
    except ValueError as exc:
        if text is None:
            raise FlagError(f"invalid boolean flag {flag.name}: {exc}") from None
        raise FlagError(f"invalid boolean value {go_quote(text)} for -{flag.name}: {exc}") from None
    given[flag.attr] = "true" if text is None else text


def _set_bool(flag: Flag, given: dict[str, Any], text: str | None) -> None:
    try:
        given[flag.attr] = True if text is None else parse_bool(text)
    except FlagError:
        raise FlagError(f"invalid boolean value {go_quote(text)} for -{flag.name}: parse error") from None


@dataclass
class Parsed:
    given: dict[str, Any]  # the flags on the command line, by attribute name
    args: list[str]        # what follows the flags (Go's flag.Args())


def parse(flags: list[Flag], argv: list[str]) -> Parsed:
    """Go's FlagSet.Parse: FlagError with Go's text, or HelpRequested."""
    by_name = {flag.name: flag for flag in flags}
    given: dict[str, Any] = {}
    args = list(argv)
    while args and len(args[0]) >= 2 and args[0][0] == "-":
        arg = args.pop(0)
        if arg == "--":
            break
        name = arg[2:] if arg[1] == "-" else arg[1:]
        if not name or name[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, equals, value = name.partition("=")
        flag = by_name.get(name)
        if flag is None:
            if name in ("h", "help"):
                raise HelpRequested()
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.kind == "bool":
            _set_bool(flag, given, value if equals else None)
            continue
        if flag.go_value and flag.go_value.is_bool:
            _set_bool_value(flag, given, value if equals else None)
            continue
        if not equals:
            if not args:
                raise FlagError(f"flag needs an argument: -{name}")
            value = args.pop(0)
        _set(flag, given, value)
    return Parsed(given, args)


def parse_args(flags: list[Flag], argv: list[str]) -> dict[str, Any]:
    """The flags given on a daemon's command line, by attribute name: nothing may follow them."""
    parsed = parse(flags, argv)
    if parsed.args:
        raise FlagError(f"unexpected argument {parsed.args[0]!r}: nsq daemons take only flags")
    return parsed.given


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
                return [float(part) for part in value.split(",")]
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
            values[flag.attr] = flag.initial()
    unknown = sorted(key for key in config if key not in known_keys)
    return Resolved(values, unknown)


def usage(program: str, flags: list[Flag]) -> str:
    """``Usage of <program>:`` and Go's PrintDefaults: the flags sorted by name, each as ``  -name
    type`` then ``\t<help> (default x)`` (on the same line for a one-letter flag without a type),
    the default shown only when it is not the type's zero value, and a backquoted word in the help
    naming the argument instead of the type."""
    return "\n".join([f"Usage of {program}:"] + [_describe(flag) for flag in sorted(flags, key=lambda f: f.name)])


def _describe(flag: Flag) -> str:
    help_text, arg_name = flag.help, _TYPE_NAMES.get(flag.kind, "value")
    if flag.go_value:
        arg_name = "" if flag.go_value.is_bool else "value"
    quoted = re.search(r"`([^`]*)`", help_text)
    if quoted:
        arg_name = quoted.group(1)
        help_text = help_text[:quoted.start()] + arg_name + help_text[quoted.end():]
    head = f"  -{flag.name}" + (f" {arg_name}" if arg_name else "")
    line = head + ("\t" if len(head) <= 4 else "\n    \t") + help_text.replace("\n", "\n    \t")
    default = _default_text(flag)
    if default is not None:
        quoted = flag.kind == "str" and not flag.go_value
        line += f" (default {go_quote(default)})" if quoted else f" (default {default})"
    return line


def _default_text(flag: Flag) -> str | None:
    """The default as Go shows it, or None for the type's zero value (and for lists and Values)."""
    if flag.go_value:
        return flag.go_value.shown_default or None
    if flag.kind in ("list", "float_list", "value", "count") or flag.default in ("", 0, False):
        return None
    if flag.kind == "bool":
        return "true"
    if flag.kind == "duration":
        return format_duration(flag.default)
    if flag.kind == "float":
        return str(int(flag.default)) if flag.default.is_integer() else repr(flag.default)
    return str(flag.default)
