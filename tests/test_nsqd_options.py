"""nsqd/options.py and nsqd/main.py: nsqd's flags, config file and exit codes (NSQ v1.3's apps/nsqd/options.go)."""

import hashlib
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from common.goflags import FlagError
from nsqd.options import (
    CLIENT_TIMEOUT, DEFAULT_HEARTBEAT_INTERVAL, FLAGS, default_node_id, default_options, load_options, parse_address,
)

from .go_nsq import assert_usage_is_nsqs, go_program, parse_outcome, requires_go

ROOT = Path(__file__).resolve().parent.parent

# NSQ v1.3.0's defaults (apps/nsqd/options.go, nsqd/options.go NewOptions); durations in seconds.
NSQ_DEFAULTS = {
    "version": False,
    "config": "",
    "log_level": "info",
    "log_prefix": "[nsqd] ",
    "verbose": False,
    "worker_id": False,
    "tcp_address": "0.0.0.0:4150",
    "http_address": "0.0.0.0:4151",
    "broadcast_address": socket.gethostname(),
    "broadcast_tcp_port": 0,
    "broadcast_http_port": 0,
    "lookupd_tcp_address": [],
    "http_client_connect_timeout": 2.0,
    "http_client_request_timeout": 5.0,
    "data_path": "",
    "mem_queue_size": 10000,
    "max_bytes_per_file": 104857600,
    "sync_every": 2500,
    "sync_timeout": 2.0,
    "queue_scan_worker_pool_max": 4,
    "queue_scan_selection_count": 20,
    "msg_timeout": 60.0,
    "max_msg_timeout": 900.0,
    "max_msg_size": 1048576,
    "max_req_timeout": 3600.0,
    "max_body_size": 5242880,
    "max_heartbeat_interval": 60.0,
    "max_rdy_count": 2500,
    "max_output_buffer_size": 65536,
    "max_output_buffer_timeout": 30.0,
    "min_output_buffer_timeout": 0.025,
    "output_buffer_timeout": 0.25,
    "max_channel_consumers": 0,
    "https_address": "0.0.0.0:4152",
    "auth_http_address": [],
    "auth_http_request_method": "get",
    "tls_cert": "",
    "tls_key": "",
    "tls_client_auth_policy": "",
    "tls_root_ca_file": "",
    "tls_required": 0,  # TLSNotRequired
    "tls_min_version": 0x0301,  # tls.VersionTLS10
    "deflate": True,
    "max_deflate_level": 6,
    "snappy": True,
    "statsd_address": "",
    "statsd_interval": 60.0,
    "statsd_mem_stats": True,
    "statsd_prefix": "nsq.%s",
    "statsd_udp_packet_size": 508,
    "statsd_exclude_ephemeral": False,
    "e2e_processing_latency_percentile": [],
    "e2e_processing_latency_window_time": 600.0,
}

# The opt-in features beyond NSQ (README "Beyond NSQ"): every default leaves them off.
BEYOND_NSQ_DEFAULTS = {
    "http_auth_required": False,
    "msg_ttl": 0.0,
    "max_attempts": 0,
    "dead_letter_topic": "%s.dead",
    "persist_deferred": False,
    "processing_time_percentile": [],
    "enable_peek": False,
    "sigterm": "clean-shutdown",  # SIGTERM stops at once, as NSQ's (drain: nsqd/drain.py)
    "max_queue_bytes": 0,
    "queue_full": "refuse",  # the policy a bound would have: no bound, no effect
    "channel_pace": 0,
    "io_backend": "auto",  # not a feature: the epoll fast path where it exists, else portable
}


@pytest.mark.parametrize("name", NSQ_DEFAULTS)
def test_defaults_equal_nsqs(name):
    assert getattr(load_options([]), name) == NSQ_DEFAULTS[name]


@pytest.mark.parametrize("name", BEYOND_NSQ_DEFAULTS)
def test_features_beyond_nsq_are_off_by_default(name):
    assert getattr(load_options([]), name) == BEYOND_NSQ_DEFAULTS[name]


def test_every_flag_has_a_checked_default():
    assert {flag.attr for flag in FLAGS} == set(NSQ_DEFAULTS) | set(BEYOND_NSQ_DEFAULTS) | {"node_id"}


def test_flag_names_and_config_keys():
    keys = {flag.name: flag.key for flag in FLAGS}
    assert keys["node-id"] == "id"
    assert keys["max-msg-size"] == "max_msg_size"
    assert keys["tcp-address"] == "tcp_address"


def test_options_without_flags():
    assert (CLIENT_TIMEOUT, DEFAULT_HEARTBEAT_INTERVAL) == (60.0, 30.0)


def test_default_node_id_is_crc32_of_md5_of_the_hostname_mod_1024():
    # md5("localhost") = 421aa90e...3e79; CRC-32 (IEEE) of those 16 raw bytes = 1762046992; % 1024 = 16
    assert default_node_id("localhost") == 16
    assert default_node_id("nsqd-1.example.com") == zlib.crc32(hashlib.md5(b"nsqd-1.example.com").digest()) % 1024
    assert load_options([]).node_id == default_node_id(socket.gethostname())
    assert 0 <= default_node_id() < 1024


def test_flags_override_defaults():
    opts = load_options(["--msg-timeout=30s", "--max-rdy-count", "10", "-node-id=7", "--log-level=DEBUG",
                         "--tcp-address=127.0.0.1:0", "--verbose"])
    assert (opts.msg_timeout, opts.max_rdy_count, opts.node_id) == (30.0, 10, 7)
    assert (opts.log_level, opts.tcp_address, opts.verbose) == ("debug", "127.0.0.1:0", True)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqd.cfg"
    path.write_text(text)
    return str(path)


def test_config_file_keys(tmp_path):
    path = write_config(tmp_path, """
id = 12
msg_timeout = "2m"
max_req_timeout = 5000
max_msg_size = 2048
log_level = "WARN"
log_prefix = "[x] "
tcp_address = "127.0.0.1:4000"
max_output_buffer_timeout = "1s"
""")
    opts = load_options([f"--config={path}"])
    assert (opts.node_id, opts.msg_timeout, opts.max_req_timeout, opts.max_msg_size) == (12, 120.0, 5.0, 2048)
    assert (opts.log_level, opts.log_prefix, opts.tcp_address) == ("warn", "[x] ", "127.0.0.1:4000")
    assert opts.max_output_buffer_timeout == 1.0
    assert opts.unknown_config_keys == []


def test_flags_outside_nsqs_options_have_no_config_key(tmp_path):
    """As go-options: the file cannot set --version, --config, --verbose or --worker-id (NSQ's nsqd
    starts with these keys, whatever their values); ours names them among the ignored keys."""
    path = write_config(tmp_path, 'version = true\nverbose = "x"\nworker_id = 5\nconfig = 1\n')
    opts = load_options([f"--config={path}"])
    assert (opts.version, opts.verbose, opts.worker_id, opts.config) == (False, False, False, path)
    assert opts.unknown_config_keys == ["config", "verbose", "version", "worker_id"]


def test_queue_scan_config_keys(tmp_path):
    path = write_config(tmp_path, "queue_scan_selection_count = 3\nqueue_scan_worker_pool_max = 0\n")
    opts = load_options([f"--config={path}"])
    assert (opts.queue_scan_selection_count, opts.queue_scan_worker_pool_max) == (3, 0)
    assert opts.unknown_config_keys == []


def test_flag_beats_config_beats_default(tmp_path):
    path = write_config(tmp_path, "id = 12\nmax_rdy_count = 50\n")
    opts = load_options(["--node-id=3", "--config", path])
    assert (opts.node_id, opts.max_rdy_count, opts.max_body_size) == (3, 50, 5242880)


def test_node_id_is_not_a_config_key_and_is_reported(tmp_path):
    path = write_config(tmp_path, "node_id = 5\nmystery = 1\n")
    opts = load_options([f"--config={path}"])
    assert opts.node_id == default_node_id()
    assert opts.unknown_config_keys == ["mystery", "node_id"]


@pytest.mark.parametrize("text, message", [
    ("id = 1024\n", "--node-id must be [0,1024), got 1024"),
    ("id = -1\n", "--node-id must be [0,1024), got -1"),
    ("id = 1.5\n", "config key 'id': invalid value 1.5 for a int option"),
    ('msg_timeout = "10x"\n', "config key 'msg_timeout': time: unknown unit \"x\" in duration \"10x\""),
    ("msg_timeout = true\n", "config key 'msg_timeout': invalid value True"),
    ('log_level = "loud"\n', "failed parsing log_level loud"),
    ('tls_required = "maybe"\n', "failed parsing tls_required maybe"),
    ('tls_min_version = "tls9"\n', "failed parsing tls_min_version tls9"),
    ('queue_scan_selection_count = "x"\n', "config key 'queue_scan_selection_count': invalid value 'x' for a int option"),
    ("queue_scan_selection_count = -1\n", "--queue-scan-selection-count must be 0 or more, got -1"),
    ("max_msg_size = 0\n", "--max-msg-size must be greater than 0, got 0"),
    ("tcp_address = 4150\n", "config key 'tcp_address': invalid value 4150 for a str option"),
])
def test_bad_config_values(tmp_path, text, message):
    path = write_config(tmp_path, text)
    with pytest.raises(FlagError) as info:
        load_options([f"--config={path}"])
    assert str(info.value).startswith(message)


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(FlagError, match=f"failed to load config file {missing}: No such file or directory"):
        load_options([f"--config={missing}"])


@pytest.mark.parametrize("content", [b"id = = 3\n", b"[unclosed\n", b"id = 1\nid = 2\n", b"id = \xff\n"])
def test_unreadable_toml(tmp_path, content):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(FlagError, match=f"failed to load config file {path}: "):
        load_options([f"--config={path}"])


@pytest.mark.parametrize("argv, message", [
    (["--node-id=1024"], "--node-id must be [0,1024), got 1024"),
    (["--node-id=-1"], "--node-id must be [0,1024), got -1"),
    (["--log-level=verbose"], "invalid value \"verbose\" for flag -log-level: invalid log level 'verbose' "
                              "(debug, info, warn, error, fatal)"),
    (["--queue-scan-selection-count=-1"], "--queue-scan-selection-count must be 0 or more, got -1"),
    (["--max-msg-size=0"], "--max-msg-size must be greater than 0, got 0"),
    (["--max-body-size=-1"], "--max-body-size must be greater than 0, got -1"),
    (["--max-rdy-count=0"], "--max-rdy-count must be greater than 0, got 0"),
    (["--max-channel-consumers=-1"], "--max-channel-consumers must be 0 (unlimited) or more, got -1"),
    (["--msg-timeout=-1s"], "--msg-timeout must not be negative"),
    (["--min-output-buffer-timeout=1m"], "--min-output-buffer-timeout must not exceed --max-output-buffer-timeout"),
    (["--msg-timeout=16m"], "--msg-timeout must not exceed --max-msg-timeout"),
    (["--tcp-address=host:http"], "--tcp-address: invalid port in 'host:http'"),
    (["--tcp-address="], "--tcp-address must not be empty"),
    (["--msg-timeout=60"], 'invalid value "60" for flag -msg-timeout: parse error'),
    (["--bogus"], "flag provided but not defined: -bogus"),
    (["--io-backend=epoll"], "--io-backend must be one of auto, portable, got 'epoll'"),
])
def test_bad_flags(argv, message):
    with pytest.raises(FlagError) as info:
        load_options(argv)
    assert str(info.value) == message


def test_version_skips_the_config_file_and_validation(tmp_path):
    opts = load_options(["--version", f"--config={tmp_path / 'missing.toml'}", "--node-id=5000"])
    assert opts.version is True


def test_default_options_with_overrides():
    opts = default_options(tcp_address="127.0.0.1:0", max_rdy_count=5)
    assert (opts.tcp_address, opts.max_rdy_count, opts.msg_timeout) == ("127.0.0.1:0", 5, 60.0)
    with pytest.raises(FlagError, match="unknown option no_such_option"):
        default_options(no_such_option=1)
    with pytest.raises(FlagError, match="--node-id must be"):
        default_options(node_id=1024)


@pytest.mark.parametrize("address, parsed", [
    ("0.0.0.0:4150", ("0.0.0.0", 4150)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    (":4150", ("", 4150)),
    ("[::1]:4150", ("::1", 4150)),
    ("localhost:65535", ("localhost", 65535)),
    ("/tmp/nsqd.sock", "/tmp/nsqd.sock"),
    ("nsqd.sock", "nsqd.sock"),
])
def test_parse_address(address, parsed):
    assert parse_address(address, "--tcp-address") == parsed


@pytest.mark.parametrize("address", ["", "host:65536", "host:", "host:-1"])
def test_parse_address_refuses(address):
    with pytest.raises(FlagError):
        parse_address(address, "--tcp-address")


# -- the nsqd command, for real -----------------------------------------------------------


def run_nsqd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("args, message", [
    (["--bogus-flag"], "nsqd: flag provided but not defined: -bogus-flag"),
    (["--msg-timeout=10"], 'nsqd: invalid value "10" for flag -msg-timeout: parse error'),
    (["--node-id=1024"], "nsqd: --node-id must be [0,1024), got 1024"),
    (["--config=/nonexistent/nsqd.toml"], "nsqd: failed to load config file /nonexistent/nsqd.toml: "
                                          "No such file or directory"),
])
def test_nsqd_exits_1_with_a_message(args, message):
    result = run_nsqd(*args)
    assert result.returncode == 1
    assert result.stderr.startswith(message)
    assert result.stdout == ""


def test_nsqd_exits_1_on_bad_toml(tmp_path):
    path = write_config(tmp_path, "id = = 1\n")
    result = run_nsqd(f"--config={path}")
    assert result.returncode == 1
    assert result.stderr.startswith(f"nsqd: failed to load config file {path}: ")


def test_nsqd_version_exits_0_even_with_a_missing_config():
    result = run_nsqd("--version", "--config=/nonexistent/nsqd.toml")
    assert result.returncode == 0
    assert result.stdout.startswith("nsqd v1.3.0 (built w/")
    assert result.stderr == ""


# -- beside NSQ's nsqd ----------------------------------------------------------------------

# Flags ours has and NSQ v1.3.0's has not: the opt-in features beyond NSQ, and
# --auth-http-request-method from NSQ's master (README "Deliberate differences").
OURS_ONLY = {name.replace("_", "-") for name in BEYOND_NSQ_DEFAULTS} | {"auth-http-request-method"}


@requires_go
def test_usage_is_nsqs_for_every_flag_nsq_has():
    assert_usage_is_nsqs(run_nsqd("-help").stderr, "nsqd", OURS_ONLY)


@requires_go
@pytest.mark.parametrize("args", [
    ["--worker-id"], ["--worker-id=false"], ["--worker-id=5"],
    ["--queue-scan-selection-count=3"], ["--queue-scan-selection-count=-1"], ["--queue-scan-selection-count=x"],
    ["--queue-scan-selection-count"], ["--queue-scan-worker-pool-max=0x10"], ["--queue-scan-worker-pool-max=1.5"],
    ["--queue-scan-worker-pool-max=99999999999999999999"],
    ["--log-level=WARN"], ["--log-level=loud"], ["--log-level="], ["--log-level", "Debug"],
    ["--tls-required"], ["--tls-required=tcp-https"], ["--tls-required=MAYBE"], ["--tls-required="],
    ["--tls-min-version=TLS1.2"], ["--tls-min-version=tls9"], ["--tls-min-version=ssl3.0"], ["--tls-min-version="],
    ["--tls-min-version"],
    ["--node-id=5000"], ["--node-id=x"], ["--verbose=no"], ["--max-deflate-level=0"], ["--sync-timeout=5"],
    ["--e2e-processing-latency-percentile=0.5,x"], ["--lookupd-tcp-address"], ["--http-address", "/tmp/x.sock"],
])
def test_the_same_flags_are_accepted_and_refused_as_by_nsqs(args):
    """Go's error, word for word, where it refuses (ours prefixes the program's name, README
    "Command lines"); validation after parsing is not compared here."""
    ours = parse_outcome([sys.executable, "-m", "nsqd"], args, "nsqd")
    assert ours == parse_outcome([go_program("nsqd")], args, "nsqd")
