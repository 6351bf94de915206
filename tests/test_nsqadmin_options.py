"""nsqadmin's flags, config file and start-up: NSQ v1.3's names and defaults (apps/nsqadmin/main.go),
its start-up errors with exit status 1, and a clean exit 0 on SIGTERM/SIGINT."""

import signal
import socket
import subprocess
import sys

import httpx
import pytest

from common import VERSION
from common.goflags import FlagError
from nsqadmin.nsqadmin import bind
from nsqadmin.options import load_options, normalize_base_path

from .admin_helpers import AdminProcess
from .go_nsq import assert_usage_is_nsqs, go_program, parse_outcome, requires_go
from .helpers import ROOT


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqadmin", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)


def test_defaults_are_nsq_v13s():
    opts = load_options(["--lookupd-http-address=127.0.0.1:4161"])
    assert (opts.http_address, opts.base_path, opts.allow_config_from_cidr, opts.acl_http_header) == \
        ("0.0.0.0:4171", "/", "127.0.0.1/8", "X-Forwarded-User")
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout, opts.statsd_interval) == (2.0, 5.0, 60.0)
    assert (opts.statsd_prefix, opts.statsd_counter_format, opts.statsd_gauge_format) == \
        ("nsq.%s", "stats.counters.%s.count", "stats.gauges.%s")
    assert (opts.log_level, opts.log_prefix, opts.admin_user, opts.nsqd_http_address) == ("info", "[nsqadmin] ", [], [])


def test_repeatable_flags_and_go_syntax():
    opts = load_options(["-lookupd-http-address", "a:1", "--lookupd-http-address=b:2", "--admin-user=x",
                         "--admin-user", "y", "--http-client-request-timeout=1m30s", "--proxy-graphite",
                         "--graphite-url=http://graphite:8080"])
    assert (opts.lookupd_http_address, opts.admin_user) == (["a:1", "b:2"], ["x", "y"])
    assert opts.http_client_request_timeout == 90.0 and opts.proxy_graphite is True


@pytest.mark.parametrize("path, normal", [("", "/"), ("/", "/"), ("admin", "/admin"), ("/admin/", "/admin"),
                                          ("//a//b/../c/", "/a/c")])
def test_base_path_is_normalized_as_go_does(path, normal):
    assert normalize_base_path(path) == normal


@pytest.mark.parametrize("args, message", [
    ([], "--nsqd-http-address or --lookupd-http-address required"),
    (["--lookupd-http-address=a:1", "--nsqd-http-address=b:2"], "use --nsqd-http-address or --lookupd-http-address not both"),
    (["--nsqd-http-address=a:1", "--http-client-tls-cert=c.pem"], "--http-client-tls-key must be specified with --http-client-tls-cert"),
    (["--nsqd-http-address=a:1", "--http-client-tls-key=k.pem"], "--http-client-tls-cert must be specified with --http-client-tls-key"),
    (["--nsqd-http-address=http://a:1"], "failed to resolve --nsqd-http-address (http://a:1) - give host:port, without a scheme"),
    (["--lookupd-http-address=nohost"], "failed to resolve --lookupd-http-address (nohost) - missing or invalid port"),
    (["--nsqd-http-address=a:1", "--allow-config-from-cidr=10.0.0.300/8"], "failed to parse --allow-config-from-cidr"),
    (["--nsqd-http-address=a:1", "--allow-config-from-cidr=10.0.0.1"], "invalid CIDR address: 10.0.0.1"),
    (["--nsqd-http-address=a:1", "--log-level=loud"], "invalid log level 'loud'"),
    (["--nsqd-http-address=a:1", "--notification-http-endpoint=example.com/hook"], "must be a full http(s):// URL"),
    (["--nsqd-http-address=a:1", "--graphite-url=graphite:8080"], "failed to parse --graphite-url"),
    (["--nsqd-http-address=a:1", "--no-such-flag"], "flag provided but not defined: -no-such-flag"),
])
def test_bad_flags_are_refused_with_a_clear_message(args, message):
    with pytest.raises(FlagError, match=None) as caught:
        load_options(args)
    assert message in str(caught.value)


def test_the_command_exits_1_on_bad_flags_and_prints_why():
    done = run("--lookupd-http-address=a:1", "--nsqd-http-address=b:2")
    assert done.returncode == 1
    assert done.stderr.strip() == "nsqadmin: use --nsqd-http-address or --lookupd-http-address not both"


def test_version_and_usage():
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith(f"nsqadmin v{VERSION} (built w/python")
    usage = run("--help")
    assert usage.returncode == 0
    for flag in ("-lookupd-http-address value", "-http-address string", "-base-path string", "-admin-user value",
                 "-notification-http-endpoint string", "-allow-config-from-cidr string", "-acl-http-header string",
                 "-http-client-tls-root-ca-file string", "-graphite-url string", "-statsd-interval duration"):
        assert flag in usage.stderr, flag


# Ours only (README "Beyond NSQ"): the live tail, the secret for nsqd's HTTP auth, the stats history.
OURS_ONLY = {"enable-live-tail", "enable-peek", "nsqd-auth-secret", "rollup-interval", "spark-master", "stats-dir",
             "stats-interval", "stats-retention"}


@requires_go
def test_usage_is_nsqs_for_every_flag_nsq_has():
    assert_usage_is_nsqs(run("-help").stderr, "nsqadmin", OURS_ONLY)


@requires_go
@pytest.mark.parametrize("args", [
    ["--log-level=ERROR"], ["--log-level=loud"], ["--log-level"], ["--proxy-graphite=yes"],
    ["--statsd-interval=5"], ["--lookupd-http-address"], ["--base-path="], ["--worker-id"],
])
def test_the_same_flags_are_accepted_and_refused_as_by_nsqs(args):
    ours = parse_outcome([sys.executable, "-m", "nsqadmin"], args, "nsqadmin")
    assert ours == parse_outcome([go_program("nsqadmin")], args, "nsqadmin")


def test_a_port_in_use_is_a_start_up_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("--lookupd-http-address=127.0.0.1:1", f"--http-address=127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"FATAL: --http-address: listen (127.0.0.1:{port}) failed - address already in use" in done.stderr


def test_unreadable_tls_files_are_a_start_up_error(tmp_path):
    done = run("--nsqd-http-address=127.0.0.1:1", f"--http-client-tls-root-ca-file={tmp_path / 'missing.pem'}",
               "--http-address=127.0.0.1:0")
    assert done.returncode == 1
    assert "FATAL: --http-client-tls-*: cannot use the TLS files given - no such file or directory" in done.stderr


def test_config_file_keys_are_nsqs(tmp_path):
    config = tmp_path / "nsqadmin.cfg"
    config.write_text('nsqlookupd_http_addresses = ["127.0.0.1:1", "127.0.0.1:2"]\nadmin_users = ["ops"]\n'
                      'base_path = "/nsq"\nhttp_client_request_timeout = "3s"\nacl_http_header = "X-User"\n'
                      'no_such_key = 1\n')
    admin = AdminProcess(f"--config={config}", "--admin-user=cli")  # the command line wins over the file
    try:
        get = lambda opt: httpx.get(f"{admin.url}/nsq/config/{opt}")  # noqa: E731
        assert get("nsqlookupd_http_addresses").json() == ["127.0.0.1:1", "127.0.0.1:2"]
        assert get("admin_users").json() == ["cli"]
        assert get("http_client_request_timeout").json() == 3_000_000_000
        assert get("acl_http_header").text == "X-User"
    finally:
        assert admin.stop() == 0
    assert "ignoring unknown or unsupported key 'no_such_key'" in admin.log()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(signum):
    admin = AdminProcess("--lookupd-http-address=127.0.0.1:1")
    assert httpx.get(f"{admin.url}/ping").text == "OK"
    assert admin.stop(signum) == 0
    log = admin.log()
    assert f"received {signal.Signals(signum).name}, exiting" in log and "NSQ: bye" in log
    assert "Traceback" not in log


def test_the_listener_is_a_tcp_socket_so_asyncio_disables_nagle():
    """A socket made with protocol 0 gets no TCP_NODELAY from asyncio: each small answer then waits
    ~40 ms for the client's delayed ACK."""
    sock = bind("127.0.0.1:0")
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
