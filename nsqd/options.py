"""nsqd's flags, with NSQ v1.3's names and defaults (apps/nsqd/options.go, nsqd/options.go)."""

import hashlib
import socket
import zlib
from types import SimpleNamespace

from common.goflags import Flag, FlagError, GoValue, parse_bool
from common.goquote import go_quote
from serving.daemon import LOG_LEVEL, config_level, load, options_with
from serving.listeners import parse_address

from .dead_letter import MAX_LIMIT, check_pattern
from .io_backend import CHOICES as IO_BACKENDS
from .pacing import check_pace_flag
from .queue_bound import check_bound_flags

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
SIGTERM_CHOICES = ("clean-shutdown", "drain")  # beyond NSQ: --sigterm (nsqd/drain.py)


def default_node_id(hostname: str | None = None) -> int:
    """crc32(md5(hostname)) % 1024, as nsqd computes it."""
    digest = hashlib.md5((hostname or socket.gethostname()).encode()).digest()
    return zlib.crc32(digest) % 1024


# --tls-required as nsqd holds it (nsqd/options.go), and --tls-min-version as Go's tls.Version*.
TLS_NOT_REQUIRED, TLS_REQUIRED_EXCEPT_HTTP, TLS_REQUIRED = 0, 1, 2
TLS_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}


def _parse_tls_required(text: str) -> int:
    """nsqd's tlsRequiredOption.Set: ``tcp-https`` or a strconv.ParseBool boolean, in any case."""
    text = text.lower()
    if text == "tcp-https":
        return TLS_REQUIRED_EXCEPT_HTTP
    try:
        return TLS_REQUIRED if parse_bool(text) else TLS_NOT_REQUIRED
    except FlagError:
        raise ValueError(f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax") from None


def _parse_tls_min_version(text: str) -> int:
    """nsqd's tlsMinVersionOption.Set: a version named in any case; empty keeps the default."""
    text = text.lower()
    if text and text not in TLS_VERSIONS:
        raise ValueError(f"unknown tlsVersionOption {go_quote(text)}")
    return TLS_VERSIONS.get(text, TLS_VERSIONS["tls1.0"])


FLAGS = [
    Flag("version", "bool", False, "print version string"),
    Flag("config", "str", "", "path to config file"),
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal", go_value=LOG_LEVEL),
    Flag("log-prefix", "str", "[nsqd] ", "log message prefix"),
    Flag("verbose", "bool", False, "[deprecated] has no effect, use --log-level"),
    Flag("node-id", "int", default_node_id(), "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)", cfg_key="id"),
    Flag("worker-id", "bool", False, "[deprecated] use --node-id"),
    Flag("tcp-address", "str", "0.0.0.0:4150", "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
    Flag("http-address", "str", "0.0.0.0:4151", "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)"),
    Flag("broadcast-address", "str", socket.gethostname(), "address that will be registered with lookupd (defaults to the OS hostname)"),
    Flag("broadcast-tcp-port", "int", 0, "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)"),
    Flag("broadcast-http-port", "int", 0, "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)"),
    Flag("lookupd-tcp-address", "list", [], "lookupd TCP address (may be given multiple times)", cfg_key="nsqlookupd_tcp_addresses"),
    Flag("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect"),
    Flag("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request"),
    Flag("data-path", "str", "", "path to store disk-backed messages"),
    Flag("mem-queue-size", "int", 10000, "number of messages to keep in memory (per topic/channel)"),
    Flag("max-bytes-per-file", "int", 100 * 1024 * 1024, "number of bytes per diskqueue file before rolling"),
    Flag("sync-every", "int", 2500, "number of messages per diskqueue fsync"),
    Flag("sync-timeout", "duration", 2.0, "duration of time per diskqueue fsync"),
    # accepted and shown in /config, but each timeout here fires on its own (README "Deliberate differences")
    Flag("queue-scan-worker-pool-max", "int", 4, "max concurrency for checking in-flight and deferred message timeouts"),
    Flag("queue-scan-selection-count", "int", 20, "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts"),
    Flag("msg-timeout", "duration", 60.0, "default duration to wait before auto-requeing a message"),
    Flag("max-msg-timeout", "duration", 15 * 60.0, "maximum duration before a message will timeout"),
    Flag("max-msg-size", "int", 1024 * 1024, "maximum size of a single message in bytes"),
    Flag("max-req-timeout", "duration", 60 * 60.0, "maximum requeuing timeout for a message"),
    Flag("max-body-size", "int", 5 * 1024 * 1024, "maximum size of a single command body"),
    Flag("max-heartbeat-interval", "duration", 60.0, "maximum client configurable duration of time between client heartbeats"),
    Flag("max-rdy-count", "int", 2500, "maximum RDY count for a client"),
    Flag("max-output-buffer-size", "int", 64 * 1024, "maximum client configurable size (in bytes) for a client output buffer"),
    Flag("max-output-buffer-timeout", "duration", 30.0, "maximum client configurable duration of time between flushing to a client"),
    Flag("min-output-buffer-timeout", "duration", 0.025, "minimum client configurable duration of time between flushing to a client"),
    Flag("output-buffer-timeout", "duration", 0.25, "default duration of time between flushing data to clients"),
    Flag("max-channel-consumers", "int", 0, "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)"),
    # beyond NSQ, off by default (README "Beyond NSQ")
    Flag("msg-ttl", "duration", 0.0, "drop messages older than this before delivery, for every topic without a TTL of its own (POST /topic/ttl); 0 = never"),
    Flag("max-attempts", "int", 0, "move a message delivered this many times on a durable channel to its topic's dead-letter topic instead of delivering it again, for every channel without a limit of its own (POST /channel/max_attempts); 0 = never"),
    Flag("dead-letter-topic", "str", "%s.dead", "name of a topic's dead-letter topic, %s for the topic's name"),
    Flag("io-backend", "str", "auto", "how TCP connections are read and written: auto (the epoll fast path where select.epoll exists, else portable) or portable (trio streams)"),
    Flag("processing-time-percentile", "float_list", [], "per channel, percentiles (as float (0, 1.0]) of the time from a delivery to its FIN to track, over --e2e-processing-latency-window-time, with the REQ and timeout counts of that window (comma separated '0.5,0.99'; empty = off)", cfg_key="processing_time_percentiles"),
    Flag("enable-peek", "bool", False, "answer GET /channel/peek: a channel's next queued messages, bodies included, without taking them (bodies can be sensitive; off by default)"),
    Flag("max-queue-bytes", "int", 0, "bound each topic's and each channel's queue (memory and disk) to this many bytes of messages, for every topic without a bound of its own (POST /topic/max_queue_bytes); 0 = unbounded"),
    Flag("queue-full", "str", "refuse", "what a queue at --max-queue-bytes does with more: refuse (publishes fail: E_PUB_FAILED, HTTP 503) or drop-oldest (its oldest messages are dropped and counted)"),
    Flag("channel-pace", "int", 0, "deliver at most this many messages a second on each channel without a pace of its own (POST /channel/pace), across all of its consumers; 0 = unpaced"),
    Flag("persist-deferred", "bool", False, "keep deferred messages with their due time in files beside the disk queues, so they keep their delay across restarts (with --mem-queue-size=0 also while running, with messages in flight)"),
    Flag("sigterm", "str", "clean-shutdown", "what SIGTERM does: clean-shutdown (stop now, keeping undelivered messages on disk) or drain (refuse new messages, deliver every message held, then exit; as PUT /config/drain)"),
    # TLS, compression and AUTH (checked and converted in _validate_security)
    Flag("https-address", "str", "0.0.0.0:4152", "<addr>:<port> to listen on for HTTPS clients"),
    Flag("auth-http-address", "list", [], "<addr>:<port> or a full url to query auth server (may be given multiple times)", cfg_key="auth_http_addresses"),
    Flag("auth-http-request-method", "str", "get", "HTTP method to use for auth server requests: get or post"),
    Flag("http-auth-required", "bool", False, "require an auth server's grant (Authorization: Bearer <secret>) for every HTTP route but /ping and /info (needs --auth-http-address)"),
    Flag("tls-cert", "str", "", "path to certificate file"),
    Flag("tls-key", "str", "", "path to key file"),
    Flag("tls-client-auth-policy", "str", "", "client certificate auth policy ('require' or 'require-verify')"),
    Flag("tls-root-ca-file", "str", "", "path to certificate authority file"),
    Flag("tls-required", "str", "false", "require TLS for client connections (true, false, tcp-https)",
         go_value=GoValue(_parse_tls_required, is_bool=True)),
    Flag("tls-min-version", "str", "tls1.0", "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
         go_value=GoValue(_parse_tls_min_version, "tls1.0")),
    Flag("deflate", "bool", True, "enable deflate feature negotiation (client compression)"),
    Flag("max-deflate-level", "int", 6, "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)"),
    Flag("snappy", "bool", True, "enable snappy feature negotiation (client compression)"),
    # statsd and end-to-end latency
    Flag("statsd-address", "str", "", "UDP <addr>:<port> of a statsd daemon for pushing stats"),
    Flag("statsd-interval", "duration", 60.0, "duration between pushing to statsd"),
    Flag("statsd-mem-stats", "bool", True, "toggle sending memory and GC stats to statsd"),
    Flag("statsd-prefix", "str", "nsq.%s", "prefix used for keys sent to statsd (%s for host replacement)"),
    Flag("statsd-udp-packet-size", "int", 508, "the size in bytes of statsd UDP packets"),
    Flag("statsd-exclude-ephemeral", "bool", False, "Skip ephemeral topics and channels when sending stats to statsd"),
    Flag("e2e-processing-latency-percentile", "float_list", [], "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)", cfg_key="e2e_processing_latency_percentiles"),
    Flag("e2e-processing-latency-window-time", "duration", 600.0, "calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds)"),
]

# Options without flags (nsqd/options.go NewOptions).
CLIENT_TIMEOUT = 60.0
DEFAULT_HEARTBEAT_INTERVAL = CLIENT_TIMEOUT / 2


def _validate(opts: SimpleNamespace) -> None:
    if not 0 <= opts.node_id < 1024:
        raise FlagError(f"--node-id must be [0,1024), got {opts.node_id}")
    opts.log_level = config_level(opts.log_level)
    for name in ("max_msg_size", "max_body_size", "max_rdy_count", "max_output_buffer_size",
                 "max_bytes_per_file", "sync_every"):
        if getattr(opts, name) <= 0:
            raise FlagError(f"--{name.replace('_', '-')} must be greater than 0, got {getattr(opts, name)}")
    if opts.queue_scan_selection_count < 0:  # NSQ's queueScanLoop panics (makechan: size out of range)
        raise FlagError(f"--queue-scan-selection-count must be 0 or more, got {opts.queue_scan_selection_count}")
    if opts.mem_queue_size < 0:
        raise FlagError(f"--mem-queue-size must be 0 or more, got {opts.mem_queue_size}")
    if not 0 <= opts.max_attempts <= MAX_LIMIT:
        raise FlagError(f"--max-attempts must be in [0, {MAX_LIMIT}], got {opts.max_attempts}")
    check_pattern(opts.dead_letter_topic)
    check_pace_flag(opts.channel_pace)
    check_bound_flags(opts.max_queue_bytes, opts.queue_full)
    if opts.io_backend not in IO_BACKENDS:
        raise FlagError(f"--io-backend must be one of {', '.join(IO_BACKENDS)}, got {opts.io_backend!r}")
    if opts.sigterm not in SIGTERM_CHOICES:
        raise FlagError(f"--sigterm must be one of {', '.join(SIGTERM_CHOICES)}, got {opts.sigterm!r}")
    if opts.max_channel_consumers < 0:
        raise FlagError(f"--max-channel-consumers must be 0 (unlimited) or more, got {opts.max_channel_consumers}")
    for name in ("msg_timeout", "max_msg_timeout", "max_req_timeout", "max_heartbeat_interval",
                 "max_output_buffer_timeout", "min_output_buffer_timeout", "output_buffer_timeout",
                 "sync_timeout", "msg_ttl"):
        if getattr(opts, name) < 0:
            raise FlagError(f"--{name.replace('_', '-')} must not be negative")
    if opts.min_output_buffer_timeout > opts.max_output_buffer_timeout:
        raise FlagError("--min-output-buffer-timeout must not exceed --max-output-buffer-timeout")
    if opts.msg_timeout > opts.max_msg_timeout:
        raise FlagError("--msg-timeout must not exceed --max-msg-timeout")
    parse_address(opts.tcp_address, "--tcp-address")
    for address in opts.lookupd_tcp_address:
        validate_lookupd_address(address)
    for name in ("broadcast_tcp_port", "broadcast_http_port"):
        if not 0 <= getattr(opts, name) <= 65535:
            raise FlagError(f"--{name.replace('_', '-')} must be a port number, got {getattr(opts, name)}")
    if opts.http_address:
        parse_address(opts.http_address, "--http-address")
    _validate_security(opts)
    _validate_statsd_and_e2e(opts)


def _as_held(value, parse, key: str) -> int:
    """A Value option as nsqd holds it (a number, as given when embedding). A flag's was checked as
    it was parsed, so a bad one came from the config file, refused in NSQ's words."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return parse(str(value))
    except ValueError:
        raise FlagError(f"failed parsing {key} {value}") from None


def _validate_security(opts: SimpleNamespace) -> None:
    """nsqd.New's checks: a bad --max-deflate-level, or TLS required with no cert and key, stop nsqd."""
    opts.tls_required = _as_held(opts.tls_required, _parse_tls_required, "tls_required")
    opts.tls_min_version = _as_held(opts.tls_min_version, _parse_tls_min_version, "tls_min_version")
    if not 1 <= opts.max_deflate_level <= 9:
        raise FlagError("--max-deflate-level must be [1,9]")
    opts.auth_http_request_method = opts.auth_http_request_method.lower()
    if opts.auth_http_request_method not in ("get", "post"):
        raise FlagError(f"--auth-http-request-method must be get or post, got {opts.auth_http_request_method!r}")
    if opts.http_auth_required and not opts.auth_http_address:
        raise FlagError("--http-auth-required needs --auth-http-address")
    if opts.tls_client_auth_policy and opts.tls_required == TLS_NOT_REQUIRED:
        opts.tls_required = TLS_REQUIRED
    if opts.tls_required != TLS_NOT_REQUIRED and not opts.tls_cert and not opts.tls_key:
        raise FlagError("cannot require TLS client connections without TLS key and cert")
    if opts.https_address:
        parse_address(opts.https_address, "--https-address")


def _validate_statsd_and_e2e(opts: SimpleNamespace) -> None:
    for percentile in opts.e2e_processing_latency_percentile + opts.processing_time_percentile:
        if not 0 < percentile <= 1:
            raise FlagError(f"Invalid percentile: {percentile!r}".removesuffix(".0"))
    # NSQ would spin forever on a zero window and panic on a zero interval
    for name in ("e2e_processing_latency_window_time", "statsd_interval"):
        if getattr(opts, name) <= 0:
            raise FlagError(f"--{name.replace('_', '-')} must be greater than 0")
    if opts.statsd_udp_packet_size <= 0:
        raise FlagError(f"--statsd-udp-packet-size must be greater than 0, got {opts.statsd_udp_packet_size}")


def validate_lookupd_address(address: str) -> None:
    """An nsqlookupd TCP address must be ``host:port``."""
    parsed = parse_address(address, "--lookupd-tcp-address")
    if isinstance(parsed, str) or not parsed[0]:
        raise FlagError(f"--lookupd-tcp-address: {address!r} is not host:port")


def _tls_required_as_text(config: dict) -> dict:
    if isinstance(config.get("tls_required"), (bool, int)):
        config["tls_required"] = str(config["tls_required"]).lower()  # as Go's config.Validate
    return config


def load_options(argv: list[str]) -> SimpleNamespace:
    """Resolve flags, config file and defaults into validated options, or raise FlagError."""
    return load(FLAGS, _validate, argv, _tls_required_as_text)


def default_options(**overrides) -> SimpleNamespace:
    """Defaults with overrides applied, for embedding nsqd in tests and benchmarks."""
    return options_with(FLAGS, _validate, overrides)
