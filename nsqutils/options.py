"""The flags and client settings NSQ's utilities share (apps/*: the same names and help texts)."""

from common import VERSION
from common.goflags import Flag
from nsqclient import Config
from nsqclient.config import VERSION as CLIENT_VERSION

from .golog import Fatal

GODOC = "http://godoc.org/github.com/nsqio/go-nsq#Config"
VERSION_FLAG = Flag("version", "bool", False, "print version string")
LOOKUPD_HTTP_ADDRESS = Flag("lookupd-http-address", "list", [], "lookupd HTTP address (may be given multiple times)")
NSQD_TCP_ADDRESS = Flag("nsqd-tcp-address", "list", [], "nsqd TCP address (may be given multiple times)")
MAX_IN_FLIGHT = Flag("max-in-flight", "int", 200, "max number of messages to allow in flight")
CONSUMER_OPT = Flag("consumer-opt", "value", Config,
                    f"option to passthrough to nsq.Consumer (may be given multiple times, {GODOC})")
PRODUCER_OPT = Flag("producer-opt", "value", Config,
                    f"option to passthrough to nsq.Producer (may be given multiple times, {GODOC})")
HTTP_CONNECT_TIMEOUT = Flag("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
MODE = Flag("mode", "str", "hostpool",
            "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy")
MODES = ("round-robin", "hostpool", "epsilon-greedy")


def version_line(program: str) -> str:
    return f"{program} v{VERSION}"


def client_config(config: Config, program: str, **options) -> Config:
    """The ``--consumer-opt`` / ``--producer-opt`` config with what the utility sets after them
    (its user agent, ``--max-in-flight``), as the Go utilities overwrite them."""
    try:
        return config.replace(user_agent=f"{program}/{VERSION} nsqclient/{CLIENT_VERSION}", **options)
    except ValueError as exc:
        raise Fatal(str(exc)) from None


def check_sources(nsqd_addresses: list[str], lookupd_addresses: list[str],
                  nsqd_flag: str = "--nsqd-tcp-address") -> None:
    """One kind of source, as every consuming utility requires."""
    if not nsqd_addresses and not lookupd_addresses:
        raise Fatal(f"{nsqd_flag} or --lookupd-http-address required")
    if nsqd_addresses and lookupd_addresses:
        raise Fatal(f"use {nsqd_flag} or --lookupd-http-address not both")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise Fatal(f"invalid --mode {mode!r} (one of {', '.join(MODES)})")
