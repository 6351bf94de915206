"""nsqlookupd/options.py and nsqlookupd/main.py: flags, config file, exit codes, signals,
and a real ``python -m nsqlookupd`` process (NSQ v1.3's apps/nsqlookupd/options.go)."""

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from common import VERSION
from common.goflags import FlagError
from common.protocol_v1 import MAGIC_V1, Identify, Register, ResponseReader
from nsqlookupd.options import FLAGS, default_options, load_options

from .go_nsq import go_program, parse_outcome, requires_go
from .helpers import ROOT
from .lookupd_helpers import LookupdProcess, peer_info

# NSQ v1.3.0's defaults (apps/nsqlookupd/options.go, nsqlookupd/options.go); durations in seconds.
NSQ_DEFAULTS = {
    "version": False,
    "config": "",
    "log_level": "info",
    "log_prefix": "[nsqlookupd] ",
    "verbose": False,
    "tcp_address": "0.0.0.0:4160",
    "http_address": "0.0.0.0:4161",
    "broadcast_address": socket.gethostname(),
    "inactive_producer_timeout": 300.0,
    "tombstone_lifetime": 45.0,
}


def run(*args: str, timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqlookupd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("name", NSQ_DEFAULTS)
def test_defaults_equal_nsqs(name):
    assert getattr(load_options([]), name) == NSQ_DEFAULTS[name]


def test_every_flag_has_a_checked_default():
    assert {flag.attr for flag in FLAGS} == set(NSQ_DEFAULTS)


def test_flags_override_defaults_in_go_syntax():
    opts = load_options(["--inactive-producer-timeout=1m30s", "-tombstone-lifetime", "500ms", "--log-level=WARN",
                         "--broadcast-address", "lk1", "--verbose", "--tcp-address=127.0.0.1:0"])
    assert (opts.inactive_producer_timeout, opts.tombstone_lifetime, opts.log_level, opts.broadcast_address,
            opts.verbose, opts.tcp_address) == (90.0, 0.5, "warn", "lk1", True, "127.0.0.1:0")


def test_config_file_is_toml_and_flags_win(tmp_path):
    config = tmp_path / "nsqlookupd.cfg"
    config.write_text('tcp_address = "127.0.0.1:5160"\nbroadcast_address = "from-file"\n'
                      'inactive_producer_timeout = "10s"\ntombstone_lifetime = 2000\nlog_level = "debug"\n'
                      'no_such_option = 1\n')
    opts = load_options([f"--config={config}", "--broadcast-address=from-flag"])
    assert (opts.tcp_address, opts.broadcast_address, opts.inactive_producer_timeout, opts.tombstone_lifetime,
            opts.log_level) == ("127.0.0.1:5160", "from-flag", 10.0, 2.0, "debug")  # a bare int is milliseconds
    assert opts.unknown_config_keys == ["no_such_option"]


@pytest.mark.parametrize("argv, message", [
    (["--nope"], "flag provided but not defined: -nope"),
    (["--tombstone-lifetime=45"], 'invalid value "45" for flag -tombstone-lifetime: parse error'),
    (["--log-level=loud"], "invalid log level 'loud'"),
    (["--tcp-address=127.0.0.1:99999"], "--tcp-address: invalid port"),
    (["--http-address="], "--http-address must not be empty"),
    (["--config=/nonexistent/nsqlookupd.cfg"], "failed to load config file /nonexistent/nsqlookupd.cfg"),
    (["extra"], "unexpected argument 'extra'"),
])
def test_bad_options_are_refused(argv, message):
    with pytest.raises(FlagError, match=re.escape(message)):
        load_options(argv)


def test_default_options_for_embedding():
    assert default_options(tcp_address="127.0.0.1:0").tcp_address == "127.0.0.1:0"
    with pytest.raises(FlagError):
        default_options(no_such_option=1)


def test_version_and_help_exit_0():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"nsqlookupd v{VERSION} (built w/python")
    result = run("-h")
    assert result.returncode == 0 and "-inactive-producer-timeout duration" in result.stderr


@requires_go
def test_usage_is_nsqs():
    """Go's PrintDefaults, line for line."""
    assert run("-help").stderr == subprocess.run([go_program("nsqlookupd"), "-help"], capture_output=True, text=True,
                                                 timeout=15).stderr


@requires_go
@pytest.mark.parametrize("args", [
    ["--log-level=WARN"], ["--log-level=loud"], ["--log-level="], ["--log-level"], ["--verbose=2"],
    ["--tombstone-lifetime=1"], ["--inactive-producer-timeout=-1s"], ["--tcp-address"], ["--worker-id"],
    ["--broadcast-address="],
])
def test_the_same_flags_are_accepted_and_refused_as_by_nsqs(args):
    ours = parse_outcome([sys.executable, "-m", "nsqlookupd"], args, "nsqlookupd")
    assert ours == parse_outcome([go_program("nsqlookupd")], args, "nsqlookupd")


def test_help_is_a_flag_not_a_value():
    result = run("--broadcast-address", "-h", "--bad-flag")
    assert result.returncode == 1 and result.stderr == "nsqlookupd: flag provided but not defined: -bad-flag\n"


@pytest.mark.parametrize("args", [["--bad-flag"], ["--log-level=nope"], ["--tombstone-lifetime=soon"]])
def test_bad_flags_exit_1_before_listening(args):
    result = run("--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *args)
    assert result.returncode == 1
    assert result.stderr.startswith("nsqlookupd: ") and "listening" not in result.stderr


def test_port_in_use_exits_1():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(f"--tcp-address=127.0.0.1:{port}", "--http-address=127.0.0.1:0")
    assert result.returncode == 1
    assert re.search(r"FATAL: .*[Aa]ddress already in use", result.stderr), result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_real_process_serves_and_exits_0_on_signal(signum):
    proc = LookupdProcess("--broadcast-address=lk-proc", "--log-prefix=[lk] ")
    try:
        with socket.create_connection(("127.0.0.1", proc.tcp_port), timeout=5) as sock:
            sock.sendall(MAGIC_V1 + Identify(peer_info(1)).to_bytes() + Register("proc_topic", "ch").to_bytes())
            reader, replies = ResponseReader(), []
            while len(replies) < 2:
                reader.receive_data(sock.recv(65536))
                while (reply := reader.next_response()) is not None:
                    replies.append(reply)
            assert json.loads(replies[0]) == {"broadcast_address": "lk-proc", "hostname": socket.gethostname(),
                                              "http_port": proc.http_port, "tcp_port": proc.tcp_port,
                                              "version": VERSION}
            assert replies[1] == b"OK"
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.http_port}/lookup?topic=proc_topic", timeout=5) as r:
                body = json.loads(r.read())
            assert body["channels"] == ["ch"] and body["producers"][0]["broadcast_address"] == "nsqd1"
        assert proc.stop(signum) == 0
    finally:
        proc.stop(signal.SIGKILL)
    log = "".join(proc.log_lines)
    # NSQ's log format: prefix, date, microseconds, level.
    assert re.search(r"^\[lk\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: TCP: listening on 127\.0\.0\.1:\d+$", log, re.M)
    assert "DB: client(" in log and "REGISTER category:channel key:proc_topic subkey:ch" in log
    assert "200 GET /lookup?topic=proc_topic" in log
    assert f"received {signal.Signals(signum).name}, exiting" in log
