"""nsqlookupd's flags, with NSQ v1.3's names and defaults (apps/nsqlookupd/options.go, nsqlookupd/options.go)."""

import socket
from types import SimpleNamespace

from common.goflags import Flag
from serving.daemon import LOG_LEVEL, config_level, load, options_with
from serving.listeners import parse_address

FLAGS = [
    Flag("version", "bool", False, "print version string"),
    Flag("config", "str", "", "path to config file"),
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal", go_value=LOG_LEVEL),
    Flag("log-prefix", "str", "[nsqlookupd] ", "log message prefix"),
    Flag("verbose", "bool", False, "[deprecated] has no effect, use --log-level"),
    Flag("tcp-address", "str", "0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients"),
    Flag("http-address", "str", "0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients"),
    Flag("broadcast-address", "str", socket.gethostname(), "address of this lookupd node, (default to the OS hostname)"),
    Flag("inactive-producer-timeout", "duration", 300.0,
         "duration of time a producer will remain in the active list since its last ping"),
    Flag("tombstone-lifetime", "duration", 45.0,
         "duration of time a producer will remain tombstoned if registration remains"),
]


def _validate(opts: SimpleNamespace) -> None:
    opts.log_level = config_level(opts.log_level)
    parse_address(opts.tcp_address, "--tcp-address")
    parse_address(opts.http_address, "--http-address")


def load_options(argv: list[str]) -> SimpleNamespace:
    """Resolve flags, config file and defaults into validated options, or raise FlagError."""
    return load(FLAGS, _validate, argv)


def default_options(**overrides) -> SimpleNamespace:
    """Defaults with overrides applied, for embedding nsqlookupd in tests and benchmarks."""
    return options_with(FLAGS, _validate, overrides)
