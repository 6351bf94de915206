"""common/goflags.py: Go durations, Go's flag package (syntax, values, errors, usage) and go-options
config resolution. The utilities' and the daemons' command lines run on it end to end in
test_utils_*.py, test_nsqd_options.py and test_nsqlookupd_process.py."""

import pytest

from common.goflags import (
    Flag, FlagError, GoValue, HelpRequested, format_duration, parse, parse_args, parse_bool, parse_duration, parse_duration_ns,
    parse_float, parse_int, resolve, usage,
)

NS, US, MS, S, M, H = 1, 10**3, 10**6, 10**9, 60 * 10**9, 3600 * 10**9

FLAGS = [
    Flag("name", "str", "", "a string"),
    Flag("count", "int", 0, "an int"),
    Flag("on", "bool", False, "a bool"),
    Flag("wait", "duration", 1.0, "a duration"),
    Flag("addr", "list", [], "a repeatable string"),
    Flag("pct", "float_list", [], "floats"),
    Flag("node-id", "int", 7, "an int with its own config key", cfg_key="id"),
]
BY_NAME = {flag.name: flag for flag in FLAGS}


# -- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, ns", [
    ("0", 0), ("-0", 0), ("+0", 0),
    ("1ns", 1), ("1us", US), ("1µs", US), ("1μs", US), ("1ms", MS), ("1s", S), ("1m", M), ("1h", H),
    ("0s", 0), ("250ms", 250 * MS), ("60s", 60 * S), ("15m", 15 * M),
    ("1.5h", 90 * M), ("1.5s", 1500 * MS), (".5s", 500 * MS), ("1.s", S), ("0.000000001s", 1),
    ("1.0000000009s", S), ("1.9ns", 1),
    ("1h2m3.5s", H + 2 * M + 3500 * MS), ("2h45m", 2 * H + 45 * M), ("1s1s", 2 * S), ("1m1h", 61 * M),
    ("-1.5h", -90 * M), ("+5s", 5 * S), ("-1h2m", -(H + 2 * M)),
    ("2562047h47m16.854775807s", 2**63 - 1), ("-2562047h47m16.854775808s", -(2**63)),
    ("9223372036854775807ns", 2**63 - 1),
])
def test_go_durations(text, ns):
    assert parse_duration_ns(text) == ns


def test_parse_duration_returns_seconds():
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("250ms") == 0.25
    assert parse_duration("-1m") == -60.0


@pytest.mark.parametrize("text, message", [
    ("", 'time: invalid duration ""'),
    ("10", 'time: missing unit in duration "10"'),
    ("1.5", 'time: missing unit in duration "1.5"'),
    ("1s2", 'time: missing unit in duration "1s2"'),
    ("1.2.3s", 'time: missing unit in duration "1.2.3s"'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("1sm", 'time: unknown unit "sm" in duration "1sm"'),
    ("1S", 'time: unknown unit "S" in duration "1S"'),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
    ("1s ", 'time: unknown unit "s " in duration "1s "'),
    ("1µ", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'),
    ("s", 'time: invalid duration "s"'),
    (".s", 'time: invalid duration ".s"'),
    ("1s.", 'time: invalid duration "1s."'),
    ("-", 'time: invalid duration "-"'),
    ("+", 'time: invalid duration "+"'),
    ("--1s", 'time: invalid duration "--1s"'),
    ("+-1s", 'time: invalid duration "+-1s"'),
    (" 1s", 'time: invalid duration " 1s"'),
    ("1 s", 'time: unknown unit " s" in duration "1 s"'),
    ('"1s"', 'time: invalid duration "\\"1s\\""'),
    ("\t1s", 'time: invalid duration "\\x091s"'),
    ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("99999999999999999999h", 'time: invalid duration "99999999999999999999h"'),
])
def test_bad_durations_with_go_messages(text, message):
    with pytest.raises(FlagError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (1e-9, "1ns"), (999e-9, "999ns"), (1e-6, "1µs"), (1.5e-6, "1.5µs"), (1e-3, "1ms"),
    (0.025, "25ms"), (0.25, "250ms"), (0.999999999, "999.999999ms"), (1, "1s"), (1.5, "1.5s"), (2, "2s"),
    (59.123456789, "59.123456789s"), (60, "1m0s"), (90, "1m30s"), (600, "10m0s"), (900, "15m0s"),
    (3600, "1h0m0s"), (3723.5, "1h2m3.5s"), (86400, "24h0m0s"), (-90, "-1m30s"), (-0.001, "-1ms"),
])
def test_format_duration_like_go(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["1h2m3.5s", "250ms", "1.5µs", "24h0m0s", "0s", "-1m30s"])
def test_format_then_parse_round_trips(text):
    assert format_duration(parse_duration(text)) == text


# -- scalars ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("1", True), ("t", True), ("T", True), ("true", True), ("TRUE", True), ("True", True),
    ("0", False), ("f", False), ("F", False), ("false", False), ("FALSE", False), ("False", False),
])
def test_parse_bool(text, value):
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["", "yes", "no", "tRuE", "on", "2", " true"])
def test_parse_bool_refuses(text):
    with pytest.raises(FlagError, match=f'invalid boolean value "{text}"'):
        parse_bool(text)


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("10", 10), ("+5", 5), ("-5", -5), ("010", 8), ("0x1f", 31), ("0X1F", 31), ("0b101", 5),
    ("0o17", 15), ("0O17", 15), ("0_7", 7), ("1_000", 1000), ("0x_1f", 31), ("00", 0),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
])
def test_parse_int_like_go_base_0(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text, reason", [
    ("", "parse error"), ("abc", "parse error"), ("1.5", "parse error"), (" 5", "parse error"),
    ("5 ", "parse error"), ("08", "parse error"), ("1__0", "parse error"), ("_1", "parse error"),
    ("1_", "parse error"), ("0x", "parse error"), ("--5", "parse error"), ("+-5", "parse error"),
    ("١٢", "parse error"), ("1e3", "parse error"),
    ("9223372036854775808", "value out of range"), ("-9223372036854775809", "value out of range"),
])
def test_parse_int_refuses(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_int(text)


# -- flag syntax --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["-count=5"], ["--count=5"], ["-count", "5"], ["--count", "5"], ["-count=0x5"], ["-count=1", "-count=5"],
])
def test_int_flag_spellings(argv):
    assert parse_args(FLAGS, argv) == {"count": 5}


def test_only_given_flags_are_returned():
    assert parse_args(FLAGS, []) == {}


def test_value_may_start_with_a_dash_or_hold_equals_signs():
    assert parse_args(FLAGS, ["--name", "-x"]) == {"name": "-x"}
    assert parse_args(FLAGS, ["--name=a=b"]) == {"name": "a=b"}
    assert parse_args(FLAGS, ["--name="]) == {"name": ""}
    assert parse_args(FLAGS, ["--count", "-3"]) == {"count": -3}


@pytest.mark.parametrize("argv, value", [
    (["-on"], True), (["--on"], True), (["-on=false"], False), (["--on=0"], False), (["-on=T"], True),
    (["-on", "-on=f"], False),
])
def test_bool_flags(argv, value):
    assert parse_args(FLAGS, argv) == {"on": value}


def test_durations_on_the_command_line():
    assert parse_args(FLAGS, ["--wait=1m30s"]) == {"wait": 90.0}
    assert parse_args(FLAGS, ["-wait", "250ms"]) == {"wait": 0.25}


def test_repeatable_list():
    assert parse_args(FLAGS, ["--addr", "a:1", "--addr=b:2", "-addr", "c:3"]) == {"addr": ["a:1", "b:2", "c:3"]}
    assert parse_args(FLAGS, ["--addr=a,b"]) == {"addr": ["a,b"]}


def test_float_list_takes_commas_repeats_and_is_sorted_descending():
    assert parse_args(FLAGS, ["--pct=0.5,0.99", "--pct", "0.75"]) == {"pct": [0.99, 0.75, 0.5]}


def test_double_dash_ends_the_flags():
    assert parse_args(FLAGS, ["-count=1", "--"]) == {"count": 1}


@pytest.mark.parametrize("argv, message", [
    (["-nope"], "flag provided but not defined: -nope"),
    (["--nope=1"], "flag provided but not defined: -nope"),
    (["-Count=1"], "flag provided but not defined: -Count"),
    (["-count"], "flag needs an argument: -count"),
    (["--name"], "flag needs an argument: -name"),
    (["---count=1"], "bad flag syntax: ---count=1"),
    (["-=1"], "bad flag syntax: -=1"),
    (["--=1"], "bad flag syntax: --=1"),
    (["--count=abc"], 'invalid value "abc" for flag -count: parse error'),
    (["--count=1.5"], 'invalid value "1.5" for flag -count: parse error'),
    (["--count=99999999999999999999"], 'invalid value "99999999999999999999" for flag -count: value out of range'),
    (["--wait=10"], 'invalid value "10" for flag -wait: parse error'),
    (["--wait", "soon"], 'invalid value "soon" for flag -wait: parse error'),
    (["-on=maybe"], 'invalid boolean value "maybe" for -on: parse error'),
    (["--pct=0.5,,0.9"], "Could not parse: "),  # nsq's app.FloatArray ends the program in its own words
    (["--pct=0.5, 0.9"], "Could not parse:  0.9"),
    (["-on", "false"], "unexpected argument 'false'"),
    (["extra"], "unexpected argument 'extra'"),
    (["-"], "unexpected argument '-'"),
])
def test_flag_errors(argv, message):
    with pytest.raises(FlagError) as info:
        parse_args(FLAGS, argv)
    assert str(info.value).startswith(message)


# -- config and precedence ----------------------------------------------------------------


def resolved(given=None, config=None) -> dict:
    return resolve(FLAGS, given or {}, config or {}).values


def test_defaults_when_nothing_is_given():
    assert resolved() == {"name": "", "count": 0, "on": False, "wait": 1.0, "addr": [], "pct": [], "node_id": 7}


def test_flag_beats_config_beats_default():
    assert resolved(parse_args(FLAGS, ["--count=3"]), {"count": 2})["count"] == 3
    assert resolved({}, {"count": 2})["count"] == 2
    assert resolved({}, {})["count"] == 0


def test_a_flag_set_to_its_default_still_beats_the_config():
    assert resolved(parse_args(FLAGS, ["--on=false"]), {"on": True})["on"] is False


def test_config_key_named_by_the_flag():
    result = resolve(FLAGS, {}, {"id": 12, "node_id": 13, "node-id": 14, "zzz": 1})
    assert result.values["node_id"] == 12
    assert result.unknown_config_keys == ["node-id", "node_id", "zzz"]


def test_default_lists_are_copies():
    values = resolved()
    values["addr"].append("x")
    assert BY_NAME["addr"].default == []


@pytest.mark.parametrize("name, value, expected", [
    ("wait", 1500, 1.5),                # integers are milliseconds
    ("wait", 0, 0.0),
    ("wait", "1500", 1.5),              # so are digit strings
    ("wait", "1m30s", 90.0),
    ("wait", "-2s", -2.0),
    ("count", 5, 5),
    ("count", "5", 5),
    ("count", "+5", 5),
    ("count", "-5", -5),
    ("count", "010", 10),               # go-options parses config strings in base 10
    ("on", True, True),
    ("on", "false", False),
    ("on", "1", True),
    ("name", "x", "x"),
    ("addr", ["a", "b"], ["a", "b"]),
    ("addr", "a,b", ["a", "b"]),        # go-options splits a string on commas
    ("pct", [0.5, 1], [0.5, 1.0]),
    ("pct", "0.5, 0.9", [0.5, 0.9]),
])
def test_config_coercion(name, value, expected):
    got = resolved({}, {BY_NAME[name].key: value})[BY_NAME[name].attr]
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("name, value, message", [
    ("wait", True, "config key 'wait': invalid value True for a duration option"),
    ("wait", 1.5, "config key 'wait': invalid value 1.5 for a duration option"),
    ("wait", "abc", "config key 'wait': time: invalid duration \"abc\""),
    ("wait", "10x", "config key 'wait': time: unknown unit \"x\" in duration \"10x\""),
    ("wait", "²", "config key 'wait': time: invalid duration"),
    ("wait", [1], "config key 'wait': invalid value [1] for a duration option"),
    ("count", 5.0, "config key 'count': invalid value 5.0 for a int option"),
    ("count", True, "config key 'count': invalid value True for a int option"),
    ("count", "0x10", "config key 'count': invalid value '0x10' for a int option"),
    ("count", "５", "config key 'count': invalid value '５' for a int option"),
    ("count", "", "config key 'count': invalid value '' for a int option"),
    ("on", 1, "config key 'on': invalid value 1 for a bool option"),
    ("on", "yes", "config key 'on': invalid boolean value \"yes\""),
    ("name", 5, "config key 'name': invalid value 5 for a str option"),
    ("addr", [1, 2], "config key 'addr': invalid value [1, 2] for a list option"),
    ("addr", {"a": 1}, "config key 'addr': invalid value {'a': 1} for a list option"),
    ("pct", [True], "config key 'pct': invalid value [True] for a float_list option"),
    ("pct", ["0.5"], "config key 'pct': invalid value ['0.5'] for a float_list option"),
    ("pct", "x", "config key 'pct': could not convert string to float"),
    ("node-id", "seven", "config key 'id': invalid value 'seven' for a int option"),
])
def test_config_values_of_the_wrong_type_are_refused(name, value, message):
    with pytest.raises(FlagError) as info:
        resolved({}, {BY_NAME[name].key: value})
    assert str(info.value).startswith(message)


def test_bad_config_value_is_ignored_when_the_flag_is_given():
    assert resolved(parse_args(FLAGS, ["--wait=2s"]), {"wait": "garbage"})["wait"] == 2.0


# -- Go's flag package: where the flags end, help, the other kinds -------------------------


@pytest.mark.parametrize("argv, given, args", [
    (["-count=1", "rest", "-on"], {"count": 1}, ["rest", "-on"]),
    (["-on", "false"], {"on": True}, ["false"]),
    (["--", "-count=1"], {}, ["-count=1"]),
    (["-", "-count=1"], {}, ["-", "-count=1"]),
    (["-count", "2", ""], {"count": 2}, [""]),
])
def test_parsing_stops_at_the_first_argument_that_is_not_a_flag(argv, given, args):
    parsed = parse(FLAGS, argv)
    assert (parsed.given, parsed.args) == (given, args)


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["-help"], ["-count=1", "-h", "-nope"]])
def test_help_when_no_such_flag_is_defined(argv):
    with pytest.raises(HelpRequested):
        parse(FLAGS, argv)


def test_help_is_an_ordinary_flag_when_defined_and_ends_nothing_after_the_flags():
    assert parse([Flag("h", "bool", False, "")], ["-h"]).given == {"h": True}
    assert parse(FLAGS, ["-count=1", "x", "-h"]).args == ["x", "-h"]
    with pytest.raises(FlagError, match="flag provided but not defined: -nope"):
        parse(FLAGS, ["-nope", "-h"])


@pytest.mark.parametrize("text, value", [
    ("1.5", 1.5), ("-2", -2.0), (".5", 0.5), ("1e3", 1000.0), ("+Inf", float("inf")), ("1E-2", 0.01),
])
def test_parse_float_like_go(text, value):
    assert parse_float(text) == value


@pytest.mark.parametrize("text, reason", [
    ("", "parse error"), ("abc", "parse error"), (" 1", "parse error"), ("1_0", "parse error"),
    ("0x1p3", "parse error"),
    ("1e400", "value out of range"),
])
def test_parse_float_refuses(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_float(text)


class Settings:
    """A Go flag.Value: every occurrence adds a ``key,value`` setting."""

    def __init__(self):
        self.items = {}

    def set_flag(self, text):
        key, comma, value = text.partition(",")
        if not comma:
            raise ValueError(f"no value for {key}")
        self.items[key] = value


KINDS = [Flag("rate", "float", 0.5, "a float"), Flag("count", "count", None, "a count"),
         Flag("opt", "value", Settings, "settings")]


def test_float_count_and_value_kinds():
    given = parse(KINDS, ["-rate=2.5", "-count", "7", "-opt=a,1", "--opt", "b,2"]).given
    assert (given["rate"], given["count"], given["opt"].items) == (2.5, 7, {"a": "1", "b": "2"})
    values = resolve(KINDS, {}, {}).values
    assert values["rate"] == 0.5 and values["count"] is None and values["opt"].items == {}
    assert resolve(KINDS, {}, {}).values["opt"] is not values["opt"]  # a new Value each time


@pytest.mark.parametrize("argv, message", [
    (["-count=ten"], 'invalid value "ten" for flag -count: strconv.ParseInt: parsing "ten": invalid syntax'),
    (["-count=0x1"], 'invalid value "0x1" for flag -count: strconv.ParseInt: parsing "0x1": invalid syntax'),
    (["-count=2147483648"],
     'invalid value "2147483648" for flag -count: strconv.ParseInt: parsing "2147483648": value out of range'),
    (["-rate=fast"], 'invalid value "fast" for flag -rate: parse error'),
    (["-opt=a"], 'invalid value "a" for flag -opt: no value for a'),
])
def test_errors_of_the_other_kinds(argv, message):
    with pytest.raises(FlagError) as info:
        parse(KINDS, argv)
    assert str(info.value) == message


# -- help ---------------------------------------------------------------------------------


def test_usage_lists_flags_with_go_style_defaults():
    text = usage("prog", [
        Flag("wait", "duration", 90.0, "how long"),
        Flag("prefix", "str", "[x] ", "log prefix"),
        Flag("on", "bool", False, "switch"),
        Flag("count", "int", 2500, "how many"),
    ])
    assert text.splitlines() == [
        "Usage of prog:",
        "  -count int", "    \thow many (default 2500)",
        "  -on", "    \tswitch",
        "  -prefix string", '    \tlog prefix (default "[x] ")',
        "  -wait duration", "    \thow long (default 1m30s)",
    ]


def test_usage_is_go_printdefaults():
    """Sorted by name; zero defaults, lists and Values unshown; a one-letter bool on one line; a
    backquoted word names the argument; multi-line help indented."""
    text = usage("prog", [
        Flag("z", "bool", False, "one letter"),
        Flag("on", "bool", True, "on by default"),
        Flag("n", "int", 0, "zero default"),
        Flag("rate", "float", 2.0, "a whole float"),
        Flag("ratio", "float", 0.25, "a float"),
        Flag("addr", "list", [], "repeatable"),
        Flag("pct", "float_list", [], "floats"),
        Flag("count", "count", None, "a count"),
        Flag("opt", "value", Settings, "settings"),
        Flag("file", "str", "", "read `path` first\nthen more"),
        Flag("wait", "duration", 0.0, "zero duration"),
    ])
    assert text == "\n".join([
        "Usage of prog:",
        "  -addr value", "    \trepeatable",
        "  -count value", "    \ta count",
        "  -file path", "    \tread path first", "    \tthen more",
        "  -n int", "    \tzero default",
        "  -on", "    \ton by default (default true)",
        "  -opt value", "    \tsettings",
        "  -pct value", "    \tfloats",
        "  -rate float", "    \ta whole float (default 2)",
        "  -ratio float", "    \ta float (default 0.25)",
        "  -wait duration", "    \tzero duration",
        "  -z\tone letter",
    ])


# -- a string flag that NSQ defines as a flag.Value of its own -------------------------------


def _colour(text: str) -> None:
    if text not in ("red", "blue"):
        raise ValueError(f"unknown colour '{text}'")


def _switch(text: str) -> None:
    if text not in ("true", "false", "auto"):
        raise ValueError(f"not a switch: {text}")


VALUE_FLAGS = [
    Flag("colour", "str", "red", "a colour", go_value=GoValue(_colour, "RED")),
    Flag("switch", "str", "false", "a bool-like Value", go_value=GoValue(_switch, is_bool=True)),
]


@pytest.mark.parametrize("argv, given", [
    (["-colour", "blue"], {"colour": "blue"}),
    (["-switch"], {"switch": "true"}),
    (["-switch=auto", "-colour=red"], {"switch": "auto", "colour": "red"}),
])
def test_a_go_value_is_checked_and_kept_as_given(argv, given):
    assert parse_args(VALUE_FLAGS, argv) == given


@pytest.mark.parametrize("argv, message", [
    (["-colour=green"], "invalid value \"green\" for flag -colour: unknown colour 'green'"),
    (["-colour"], "flag needs an argument: -colour"),
    (["-switch=maybe"], 'invalid boolean value "maybe" for -switch: not a switch: maybe'),
])
def test_a_go_value_refuses_in_go_flag_words(argv, message):
    with pytest.raises(FlagError) as info:
        parse_args(VALUE_FLAGS, argv)
    assert str(info.value) == message


def test_a_bare_bool_value_whose_set_refuses_true():
    refuses = Flag("strict", "str", "", "", go_value=GoValue(_colour, is_bool=True))
    with pytest.raises(FlagError, match="^invalid boolean flag strict: unknown colour 'true'$"):
        parse_args([refuses], ["-strict"])


def test_a_go_value_shows_as_a_value_with_its_string_default():
    assert usage("prog", VALUE_FLAGS) == "\n".join([
        "Usage of prog:",
        "  -colour value", "    \ta colour (default RED)",
        "  -switch", "    \ta bool-like Value",
    ])
