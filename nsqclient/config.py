"""Client options under go-nsq's names, defaults and ranges (go-nsq config.go).

``Config(max_in_flight=200, lookupd_poll_interval=15)``, ``config.set("max_in_flight", "200")``,
or ``config.set_flag("max_in_flight,200")`` for a command line's ``--consumer-opt`` /
``--producer-opt`` value (``config.set_flag("snappy")`` sets a boolean to true).
Option names may use ``-`` for ``_``, as go-nsq's ``Config.Set`` allows.

Values: a string is read the way go-nsq reads it (Go durations such as ``"250ms"``,
``strconv.ParseBool`` booleans, integers, floats); a number given for a duration is seconds
(go-nsq would take an integer as milliseconds). A negative ``heartbeat_interval`` or
``output_buffer_timeout`` disables it, as go-nsq's -1 does. Out-of-range values raise
:class:`ConfigError` with go-nsq's wording (``invalid max_in_flight ! -1 < 0``).

TLS: ``tls_v1`` asks nsqd for TLS; ``tls_config`` takes a ready ``ssl.SSLContext``, or
``tls_root_ca_file``, ``tls_insecure_skip_verify``, ``tls_cert`` + ``tls_key`` (a client
certificate) and ``tls_min_version`` (``tls1.0`` ... ``tls1.3``) build one.
"""

import dataclasses
import socket
import ssl
from typing import Any, NamedTuple

from common.goflags import FlagError, format_duration, parse_bool, parse_duration

from .errors import ConfigError

VERSION = "1.0.0"
BACKOFF_STRATEGIES = ("exponential", "full_jitter")
TLS_VERSIONS = {"tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
                "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}


class Option(NamedTuple):
    kind: str  # "duration" (seconds), "int", "float", "bool", "str", "tls_config"
    minimum: float | None = None
    maximum: float | None = None


MINUTE = 60.0
OPTIONS: dict[str, Option] = {
    "dial_timeout": Option("duration"),
    "read_timeout": Option("duration", 0.1, 5 * MINUTE),
    "write_timeout": Option("duration", 0.1, 5 * MINUTE),
    "local_addr": Option("str"),
    "lookupd_poll_interval": Option("duration", 0.01, 5 * MINUTE),
    "lookupd_poll_jitter": Option("float", 0, 1),
    "lookupd_poll_timeout": Option("duration"),
    "max_requeue_delay": Option("duration", 0, 60 * MINUTE),
    "default_requeue_delay": Option("duration", 0, 60 * MINUTE),
    "backoff_strategy": Option("str"),
    "max_backoff_duration": Option("duration", 0, 60 * MINUTE),
    "backoff_multiplier": Option("duration", 0, 60 * MINUTE),
    "max_attempts": Option("int", 0, 65535),
    "low_rdy_idle_timeout": Option("duration", 1, 5 * MINUTE),
    "low_rdy_timeout": Option("duration", 1, 5 * MINUTE),
    "rdy_redistribute_interval": Option("duration", 0.001, 5),
    "client_id": Option("str"),
    "hostname": Option("str"),
    "user_agent": Option("str"),
    "heartbeat_interval": Option("duration"),
    "sample_rate": Option("int", 0, 99),
    "tls_v1": Option("bool"),
    "tls_config": Option("tls_config"),
    "tls_root_ca_file": Option("str"),
    "tls_insecure_skip_verify": Option("bool"),
    "tls_cert": Option("str"),
    "tls_key": Option("str"),
    "tls_min_version": Option("str"),
    "deflate": Option("bool"),
    "deflate_level": Option("int", 1, 9),
    "snappy": Option("bool"),
    "output_buffer_size": Option("int"),
    "output_buffer_timeout": Option("duration"),
    "max_in_flight": Option("int", 0),
    "msg_timeout": Option("duration", 0),
    "auth_secret": Option("str"),
    "skip_lookupd_authorization": Option("bool"),
}


def _hostname() -> str:
    return socket.gethostname()


@dataclasses.dataclass
class Config:
    """Every go-nsq option, with go-nsq's default; durations in seconds."""

    dial_timeout: float = 1.0
    read_timeout: float = 60.0
    write_timeout: float = 1.0
    local_addr: str = ""
    lookupd_poll_interval: float = 60.0
    lookupd_poll_jitter: float = 0.3
    lookupd_poll_timeout: float = 60.0
    max_requeue_delay: float = 15 * MINUTE
    default_requeue_delay: float = 90.0
    backoff_strategy: str = "exponential"
    max_backoff_duration: float = 2 * MINUTE
    backoff_multiplier: float = 1.0
    max_attempts: int = 5
    low_rdy_idle_timeout: float = 10.0
    low_rdy_timeout: float = 30.0
    rdy_redistribute_interval: float = 5.0
    client_id: str = dataclasses.field(default_factory=lambda: _hostname().split(".")[0])
    hostname: str = dataclasses.field(default_factory=_hostname)
    user_agent: str = f"nsqclient/{VERSION}"
    heartbeat_interval: float = 30.0
    sample_rate: int = 0
    tls_v1: bool = False
    tls_config: ssl.SSLContext | None = None
    tls_root_ca_file: str = ""
    tls_insecure_skip_verify: bool = False
    tls_cert: str = ""
    tls_key: str = ""
    tls_min_version: str = ""
    deflate: bool = False
    deflate_level: int = 6
    snappy: bool = False
    output_buffer_size: int = 16384
    output_buffer_timeout: float = 0.25
    max_in_flight: int = 1
    msg_timeout: float = 0.0
    auth_secret: str = ""
    # go-nsq's LookupdAuthorization: send auth_secret to nsqlookupd as a bearer token.
    skip_lookupd_authorization: bool = True

    def __post_init__(self):
        for name in OPTIONS:
            setattr(self, name, _coerce(name, getattr(self, name)))
        self.validate()

    def set(self, option: str, value: Any) -> None:
        """Set one option by go-nsq's name (``-`` or ``_``), from a string or a Python value."""
        name = option.replace("-", "_")
        if name not in OPTIONS:
            raise ConfigError(f"invalid option {option}")
        setattr(self, name, _coerce(name, value))
        self.validate()

    def set_flag(self, flag: str) -> None:
        """One ``--consumer-opt`` / ``--producer-opt`` value (go-nsq ConfigFlag): ``key,value``, or
        ``key`` alone for true."""
        key, sep, value = flag.partition(",")
        self.set(key, value if sep else True)

    def replace(self, **options) -> "Config":
        """A copy with some options changed."""
        copy = dataclasses.replace(self)
        for name, value in options.items():
            copy.set(name, value)
        return copy

    def validate(self) -> None:
        for name, option in OPTIONS.items():
            _check_range(name, option, getattr(self, name))
        if self.backoff_strategy not in BACKOFF_STRATEGIES:
            raise ConfigError(f"invalid backoff_strategy {self.backoff_strategy!r} "
                              f"(one of {', '.join(BACKOFF_STRATEGIES)})")
        if self.tls_min_version and self.tls_min_version not in TLS_VERSIONS:
            raise ConfigError(f"ERROR: {self.tls_min_version} is not a tls version")
        if self.heartbeat_interval > self.read_timeout:
            raise ConfigError(f"HeartbeatInterval {format_duration(self.heartbeat_interval)} must be less than "
                              f"ReadTimeout {format_duration(self.read_timeout)}")


def make_config(config: Config | None, options: dict[str, Any]) -> Config:
    """``config`` (or the defaults) with ``options`` applied, leaving ``config`` as it was."""
    base = config if config is not None else Config()
    return base.replace(**options) if options else base


def _coerce(name: str, value: Any) -> Any:
    kind = OPTIONS[name].kind
    try:
        if kind == "tls_config":
            if value is not None and not isinstance(value, ssl.SSLContext):
                raise ValueError("not an ssl.SSLContext")
            return value
        if isinstance(value, str):
            return _from_string(kind, value)
        if kind == "bool":
            if type(value) not in (bool, int):
                raise ValueError("not a boolean")
            return bool(value)
        if kind == "int":
            if type(value) is not int:
                raise ValueError("not an integer")
            return value
        if kind in ("duration", "float"):
            if type(value) not in (int, float):
                raise ValueError("not a number")
            return float(value)
        raise ValueError("not a string")
    except (ValueError, FlagError) as exc:
        raise ConfigError(f"failed to coerce option {name} ({value!r}) - {exc}") from None


def _from_string(kind: str, text: str) -> Any:
    if kind == "duration":
        return parse_duration(text)
    if kind == "int":
        return int(text, 10)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return parse_bool(text)
    return text


def _check_range(name: str, option: Option, value: Any) -> None:
    show = format_duration if option.kind == "duration" else (lambda number: number)
    if option.minimum is not None and value < option.minimum:
        raise ConfigError(f"invalid {name} ! {show(value)} < {show(option.minimum)}")
    if option.maximum is not None and value > option.maximum:
        raise ConfigError(f"invalid {name} ! {show(value)} > {show(option.maximum)}")
