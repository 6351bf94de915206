"""nsqadmin's flags, with NSQ v1.3's names, defaults and config keys (apps/nsqadmin/main.go,
nsqadmin/options.go), and the checks nsqadmin.New makes before it starts."""

import ipaddress
import posixpath
import re
from types import SimpleNamespace
from urllib.parse import urlsplit

from common.goflags import Flag, FlagError, format_duration
from serving.daemon import LOG_LEVEL, config_level, load, options_with
from serving.listeners import parse_address

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
HISTORY_INTERVALS = ("stats_interval", "rollup_interval")
_SPARK_MASTER = re.compile(r"local|local\[(?:[1-9][0-9]*|\*)\]"
                           r"|spark://(?:\[[0-9A-Fa-f:.]+\]|[^/:\[\]\s]+):([0-9]{1,5})")

FLAGS = [
    Flag("config", "str", "", "path to config file"),
    Flag("version", "bool", False, "print version string"),
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal", go_value=LOG_LEVEL),
    Flag("log-prefix", "str", "[nsqadmin] ", "log message prefix"),
    Flag("verbose", "bool", False, "[deprecated] has no effect, use --log-level"),
    Flag("http-address", "str", "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients"),
    Flag("base-path", "str", "/", "URL base path"),
    Flag("dev-static-dir", "str", "", "(development use only)"),
    Flag("graphite-url", "str", "", "graphite HTTP address"),
    Flag("proxy-graphite", "bool", False, "proxy HTTP requests to graphite"),
    Flag("statsd-counter-format", "str", "stats.counters.%s.count",
         "The counter stats key formatting applied by the implementation of statsd. "
         "If no formatting is desired, set this to an empty string."),
    Flag("statsd-gauge-format", "str", "stats.gauges.%s",
         "The gauge stats key formatting applied by the implementation of statsd. "
         "If no formatting is desired, set this to an empty string."),
    Flag("statsd-prefix", "str", "nsq.%s", "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)"),
    Flag("statsd-interval", "duration", 60.0, "time interval nsqd is configured to push to statsd (must match nsqd)"),
    Flag("notification-http-endpoint", "str", "",
         "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent"),
    Flag("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect"),
    Flag("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request"),
    Flag("http-client-tls-insecure-skip-verify", "bool", False,
         "configure the HTTP client to skip verification of TLS certificates"),
    Flag("http-client-tls-root-ca-file", "str", "", "path to CA file for the HTTP client"),
    Flag("http-client-tls-cert", "str", "", "path to certificate file for the HTTP client"),
    Flag("http-client-tls-key", "str", "", "path to key file for the HTTP client"),
    Flag("allow-config-from-cidr", "str", "127.0.0.1/8", "A CIDR from which to allow HTTP requests to the /config endpoint"),
    Flag("acl-http-header", "str", "X-Forwarded-User", "HTTP header to check for authenticated admin users"),
    Flag("lookupd-http-address", "list", [], "lookupd HTTP address (may be given multiple times)",
         cfg_key="nsqlookupd_http_addresses"),
    Flag("nsqd-http-address", "list", [], "nsqd HTTP address (may be given multiple times)",
         cfg_key="nsqd_http_addresses"),
    Flag("admin-user", "list", [],
         "admin user (may be given multiple times; if specified, only these users will be able to perform "
         "privileged actions; acl-http-header is used to determine the authenticated user)",
         cfg_key="admin_users"),
    Flag("stats-dir", "str", "./nsqadmin-data/stats",
         "directory of the cluster's stats history: snapshots (raw/) and the rollup job's windows (rollups/)"),
    Flag("stats-interval", "duration", 10.0,
         "how often to record a snapshot of every nsqd's /stats into --stats-dir (0 turns recording off)"),
    Flag("stats-retention", "duration", 168 * 3600.0,
         "how long the rollup job keeps raw snapshots and rollup windows in --stats-dir before deleting them"),
    Flag("rollup-interval", "duration", 300.0,
         "how often nsqadmin's rollup worker (one process it starts and restarts, keeping Spark warm between "
         "runs) rolls up the new snapshots (0 = no worker, no scheduled rollups)"),
    Flag("spark-master", "str", "local[*]",
         "Spark master of the rollup job: local, local[N], local[*] or spark://HOST:PORT"),
    Flag("nsqd-auth-secret", "str", "",
         "secret sent to nsqd as Authorization: Bearer on every HTTP request, and in AUTH for the live tail "
         "(for nsqd with --http-auth-required or --auth-http-address; keep it in the config file)"),
    Flag("enable-live-tail", "bool", False,
         "show a live tail of each topic's messages on its page (bodies can be sensitive; off by default)"),
    Flag("enable-peek", "bool", False,
         "show a channel's next queued messages on its page, read from nsqd's GET /channel/peek (nsqd needs "
         "--enable-peek too; bodies can be sensitive; off by default)"),
]


def normalize_base_path(path: str) -> str:
    """A leading ``/`` and Go's path.Clean: ``admin/`` -> ``/admin``, ``""`` -> ``/``."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    return "/" + posixpath.normpath(path).lstrip("/")  # normpath keeps POSIX's "//" root; Go's Clean does not


def check_http_address(address: str, flag: str) -> None:
    """An upstream ``host:port`` (nsqadmin adds the scheme, as NSQ's clusterinfo does)."""
    if "://" in address:
        raise FlagError(f"failed to resolve {flag} ({address}) - give host:port, without a scheme")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise FlagError(f"failed to resolve {flag} ({address}) - missing or invalid port in address")


def allowed_config_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not cidr:
        return None
    if "/" not in cidr:
        raise FlagError(f"failed to parse --allow-config-from-cidr ({cidr}) - invalid CIDR address: {cidr}")
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise FlagError(f"failed to parse --allow-config-from-cidr ({cidr}) - invalid CIDR address: {cidr}") from None


def check_spark_master(master: str) -> None:
    match = _SPARK_MASTER.fullmatch(master)
    if match is None or (match.group(1) is not None and not 0 < int(match.group(1)) < 65536):
        raise FlagError(f"invalid --spark-master {master!r}: use local, local[N], local[*] or spark://HOST:PORT")


def _check_history(opts: SimpleNamespace) -> None:
    for attr in HISTORY_INTERVALS:
        if getattr(opts, attr) < 0:
            flag = "--" + attr.replace("_", "-")
            raise FlagError(f"{flag} ({format_duration(getattr(opts, attr))}) must not be negative")
    if opts.stats_retention <= 0:
        raise FlagError(f"--stats-retention ({format_duration(opts.stats_retention)}) must be positive")
    if not opts.stats_dir and (opts.stats_interval or opts.rollup_interval):
        raise FlagError("--stats-dir must not be empty while recording or rollups are on")
    check_spark_master(opts.spark_master)


def _validate(opts: SimpleNamespace) -> None:
    opts.log_level = config_level(opts.log_level)
    if not opts.nsqd_http_address and not opts.lookupd_http_address:
        raise FlagError("--nsqd-http-address or --lookupd-http-address required")
    if opts.nsqd_http_address and opts.lookupd_http_address:
        raise FlagError("use --nsqd-http-address or --lookupd-http-address not both")
    if opts.http_client_tls_cert and not opts.http_client_tls_key:
        raise FlagError("--http-client-tls-key must be specified with --http-client-tls-cert")
    if opts.http_client_tls_key and not opts.http_client_tls_cert:
        raise FlagError("--http-client-tls-cert must be specified with --http-client-tls-key")
    for address in opts.lookupd_http_address:
        check_http_address(address, "--lookupd-http-address")
    for address in opts.nsqd_http_address:
        check_http_address(address, "--nsqd-http-address")
    if opts.proxy_graphite or opts.graphite_url:
        parts = urlsplit(opts.graphite_url)
        if opts.graphite_url and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise FlagError(f"failed to parse --graphite-url ({opts.graphite_url}) - want http(s)://host[:port]")
    allowed_config_network(opts.allow_config_from_cidr)
    if opts.notification_http_endpoint and urlsplit(opts.notification_http_endpoint).scheme not in ("http", "https"):
        raise FlagError(f"--notification-http-endpoint ({opts.notification_http_endpoint}) must be a full http(s):// URL")
    opts.base_path = normalize_base_path(opts.base_path)
    parse_address(opts.http_address, "--http-address")
    _check_history(opts)


def load_options(argv: list[str]) -> SimpleNamespace:
    """Resolve flags, config file and defaults into validated options, or raise FlagError."""
    return load(FLAGS, _validate, argv)


def default_options(**overrides) -> SimpleNamespace:
    """Defaults with overrides applied, for embedding nsqadmin in tests and benchmarks."""
    return options_with(FLAGS, _validate, overrides)
