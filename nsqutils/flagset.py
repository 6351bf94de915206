"""Go's ``flag`` package as NSQ's utilities use it (``flag.Parse`` with ``flag.ExitOnError``).

Syntax: ``-name`` or ``--name``, with ``=value`` or the next argument as the value (booleans
take only ``-name`` or ``-name=false``). Parsing stops at ``--`` or at the first argument that
is not a flag; what follows is left to the program (NSQ's utilities ignore it).

``-h`` / ``-help`` (when not defined) print the usage to stderr and exit 0. Any other error
prints Go's message, then the usage, to stderr and exits 2. The usage is ``PrintDefaults``':
flags sorted by name, ``  -name type`` then ``    \\t<help> (default x)``, the default shown
only when it is not the type's zero value, a backquoted word in the help naming the argument.

Kinds: ``str``, ``int``, ``bool``, ``duration`` (seconds), ``float``, ``list`` (a repeatable
``app.StringArray``), ``config`` (go-nsq's ``ConfigFlag``: each ``key,value`` set on one
:class:`nsqclient.Config`) and ``count`` (nsq_stat's decimal ``numValue``, None when unset).
Values are read by common/goflags' Go conversions.
"""

import math
import re
import sys
from types import SimpleNamespace
from typing import Any

from common.goflags import Flag, FlagError, format_duration, parse_bool, parse_duration_ns, parse_int
from common.goquote import go_quote
from nsqclient import Config, ConfigError

EXIT_HELP, EXIT_BAD_FLAGS = 0, 2
_TYPE_NAMES = {"str": "string", "int": "int", "bool": "", "duration": "duration", "float": "float"}
_GO_FLOAT = re.compile(r"[+-]?(inf|infinity|nan|(\d+\.?\d*|\.\d+)(e[+-]?\d+)?)", re.IGNORECASE)


class _Exit(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def parse_float(text: str) -> float:
    """strconv.ParseFloat(text, 64)."""
    if not _GO_FLOAT.fullmatch(text):
        raise ValueError("parse error")
    value = float(text)
    if math.isinf(value) and "inf" not in text.lower():
        raise ValueError("value out of range")
    return value


def _parse_count(text: str) -> int:
    """nsq_stat's numValue: strconv.ParseInt(text, 10, 32), its error as Go words it."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f'strconv.ParseInt: parsing {go_quote(text)}: invalid syntax')
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f'strconv.ParseInt: parsing {go_quote(text)}: value out of range')
    return value


def _go_float_text(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64) for the values flag defaults take."""
    return str(int(value)) if value.is_integer() else repr(value)


class FlagSet:
    def __init__(self, program: str, flags: list[Flag]):
        self.program = program
        self.flags = {flag.name: flag for flag in flags}

    # -- usage -----------------------------------------------------------------------------

    def usage(self) -> str:
        lines = [f"Usage of {self.program}:"]
        for name in sorted(self.flags):
            lines.append(self._describe(self.flags[name]))
        return "\n".join(lines) + "\n"

    def _describe(self, flag: Flag) -> str:
        help_text, arg_name = flag.help, _TYPE_NAMES.get(flag.kind, "value")
        quoted = re.search(r"`([^`]*)`", help_text)
        if quoted:
            arg_name = quoted.group(1)
            help_text = help_text[:quoted.start()] + arg_name + help_text[quoted.end():]
        head = f"  -{flag.name}" + (f" {arg_name}" if arg_name else "")
        line = head + ("\t" if len(head) <= 4 else "\n    \t") + help_text.replace("\n", "\n    \t")
        default = self._default_text(flag)
        if default is not None:
            line += f" (default {go_quote(default)})" if flag.kind == "str" else f" (default {default})"
        return line

    @staticmethod
    def _default_text(flag: Flag) -> str | None:
        """The default as Go shows it, or None for the type's zero value."""
        if flag.kind in ("list", "config", "count") or flag.default in ("", 0, False):
            return None
        if flag.kind == "duration":
            return format_duration(flag.default)
        if flag.kind == "float":
            return _go_float_text(flag.default)
        return str(flag.default)

    # -- parsing ---------------------------------------------------------------------------

    def parse(self, argv: list[str] | None = None) -> SimpleNamespace:
        """The flags' values (attribute names use ``_``), ``given`` (names set on the command line)
        and ``args`` (what follows the flags); prints and exits as Go does on ``-h`` or an error."""
        argv = sys.argv[1:] if argv is None else list(argv)
        try:
            return self._parse(argv)
        except _Exit as done:
            sys.stderr.write(self.usage())
            sys.stderr.flush()
            raise SystemExit(done.code) from None

    def _parse(self, args: list[str]) -> SimpleNamespace:
        values = {flag.attr: self._initial(flag) for flag in self.flags.values()}
        given: set[str] = set()
        while args:
            arg = args[0]
            if len(arg) < 2 or arg[0] != "-":
                break
            args = args[1:]
            if arg == "--":
                break
            name = arg[2:] if arg[1] == "-" else arg[1:]
            if not name or name[0] in "-=":
                self._fail(f"bad flag syntax: {arg}")
            name, equals, value = name.partition("=")
            flag = self.flags.get(name)
            if flag is None:
                if name in ("h", "help"):
                    raise _Exit(EXIT_HELP)
                self._fail(f"flag provided but not defined: -{name}")
            if flag.kind == "bool":
                values[flag.attr] = self._bool(flag, value) if equals else True
            else:
                if not equals:
                    if not args:
                        self._fail(f"flag needs an argument: -{name}")
                    value, args = args[0], args[1:]
                self._set(flag, values, value)
            given.add(name)
        return SimpleNamespace(**values, given=given, args=args)

    @staticmethod
    def _initial(flag: Flag) -> Any:
        if flag.kind == "list":
            return []
        if flag.kind == "config":
            return Config()
        return flag.default

    def _fail(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        raise _Exit(EXIT_BAD_FLAGS)

    def _bool(self, flag: Flag, value: str) -> bool:
        try:
            return parse_bool(value)
        except FlagError:
            self._fail(f"invalid boolean value {go_quote(value)} for -{flag.name}: parse error")

    def _set(self, flag: Flag, values: dict, value: str) -> None:
        try:
            if flag.kind == "str":
                values[flag.attr] = value
            elif flag.kind == "int":
                values[flag.attr] = parse_int(value)
            elif flag.kind == "duration":
                values[flag.attr] = self._duration(value)
            elif flag.kind == "float":
                values[flag.attr] = parse_float(value)
            elif flag.kind == "list":
                values[flag.attr].append(value)
            elif flag.kind == "config":
                values[flag.attr].set_flag(value)
            elif flag.kind == "count":
                values[flag.attr] = _parse_count(value)
            else:
                raise ValueError(f"unknown flag kind {flag.kind}")
        except (ValueError, ConfigError) as exc:
            self._fail(f"invalid value {go_quote(value)} for flag -{flag.name}: {exc}")

    @staticmethod
    def _duration(value: str) -> float:
        try:
            return parse_duration_ns(value) / 1e9
        except FlagError:
            raise ValueError("parse error") from None
