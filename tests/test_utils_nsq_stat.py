"""nsq_stat end to end: the console script polling real nsqd (directly or found through
nsqlookupd) and printing NSQ's table."""

import re
import signal

import pytest

from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import (Utility, assert_all_fatal, assert_fatal, assert_go_usage, channel_stats, http, publish,
                            run_script, run_scripts)

USAGE = """\
  -channel string
    \tNSQ channel
  -count value
    \tnumber of reports
  -http-client-connect-timeout duration
    \ttimeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    \ttimeout for HTTP request (default 5s)
  -interval duration
    \tduration of time between polling/printing output (default 2s)
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -nsqd-http-address value
    \tnsqd HTTP address (may be given multiple times)
  -topic string
    \tNSQ topic
  -version
    \tprint version
"""
HEADER = ["------rate------+----------------depth----------------+--------------metadata---------------",
          "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients"]
ROW = re.compile(r"([ \d]{7}) ([ \d]{7}) \| ([ \d]{7}) ([ \d]{7}) ([ \d]{7}) ([ \d]{5}) ([ \d]{5}) \| "
                 r"([ \d]{7}) ([ \d]{7}) ([ \d]{12}) ([ \d]{7})")


@pytest.fixture(scope="module")
def lookupd():
    proc = LookupdProcess()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def nsqds(tmp_path_factory, lookupd):
    """Two nsqd with topic ``stat`` and its channel ``c``: 3 messages on one, 2 on the other."""
    procs = [NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", "--broadcast-address=127.0.0.1",
                         f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}") for _ in range(2)]
    for proc, count in zip(procs, (3, 2)):
        http(proc.http_port, "/topic/create?topic=stat", method="POST")
        http(proc.http_port, "/channel/create?topic=stat&channel=c", method="POST")
        publish(proc.http_port, "stat", *[b"m"] * count)
    yield procs
    for proc in procs:
        proc.stop()


def numbers(line: str) -> list[int]:
    match = ROW.fullmatch(line)
    assert match, line
    return [int(group) for group in match.groups()]


def test_help_version_and_bad_flags():
    runs = run_scripts("nsq_stat", ["--help"], ["--version"], ["-count", "ten"], ["--interval=2"])
    assert_go_usage(runs[0], "nsq_stat", USAGE)
    version = runs[1]
    assert (version.returncode, version.stdout) == (0, "nsq_stat v1.3.0\n")
    bad = runs[2]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "ten" for flag -count: strconv.ParseInt: parsing "ten": '
                                 'invalid syntax\nUsage of nsq_stat:\n')
    duration = runs[3]
    assert duration.stderr.splitlines()[0] == 'invalid value "2" for flag -interval: parse error'


def test_fatal_checks():
    assert_all_fatal("nsq_stat", [
        (["--topic=t"], "--topic and --channel are required"),
        (["--topic=t", "--channel=c", "--interval=0s"], "--interval should be positive"),
        (["--topic=t", "--channel=c", "--count=0"], "--count should be positive"),
        (["--topic=t", "--channel=c"], "--nsqd-http-address or --lookupd-http-address required"),
        (["--topic=t", "--channel=c", "--nsqd-http-address=http://127.0.0.1:1"],
         "--nsqd-http-address error - address should not contain scheme"),
    ])


def test_sums_the_channel_over_every_nsqd_and_rates_what_arrives(nsqds):
    addresses = [f"--nsqd-http-address=127.0.0.1:{proc.http_port}" for proc in nsqds]
    utility = Utility("nsq_stat", "-topic", "stat", "-channel", "c", *addresses, "-interval", "500ms", "-count", "3")
    try:
        utility.wait_for_lines(2)
        publish(nsqds[0].http_port, "stat", *[b"new"] * 10)
        assert utility.wait() == 0, "".join(utility.stderr)
    finally:
        utility.kill()
    lines = [line.decode().rstrip("\n") for line in utility.stdout]
    assert lines[:2] == HEADER and len(lines) == 5
    rows = [numbers(line) for line in lines[2:]]
    assert sum(row[0] for row in rows) == 20  # 10 messages over 0.5 s intervals
    assert [row[1] for row in rows] == [0, 0, 0]  # nothing consumed
    #                   total mem disk inflt def req t-o msgs clients
    assert rows[-1][2:] == [15, 15, 0, 0, 0, 0, 0, 15, 0]


def test_through_lookupd_with_the_header_every_25_polls(nsqds, lookupd):
    result = run_script("nsq_stat", "--topic=stat", "--channel=c", "--interval=10ms", "--count=26",
                        f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 30
    assert lines[:2] == HEADER and lines[26:28] == HEADER
    queued = sum(channel_stats(proc.http_port, "stat", "c")["depth"] for proc in nsqds)  # earlier tests publish too
    assert queued >= 5
    assert {tuple(numbers(line)[2:]) for line in lines[2:26] + lines[28:]} == {(queued, queued, 0, 0, 0, 0, 0,
                                                                                 queued, 0)}


def test_missing_channel_or_nsqd_is_fatal(nsqds):
    address = f"--nsqd-http-address=127.0.0.1:{nsqds[0].http_port}"
    assert_fatal(run_script("nsq_stat", "--topic=stat", "--channel=other", address),
                 "ERROR: failed to find channel(other) in stats metadata for topic(stat)")
    down = run_script("nsq_stat", "--topic=stat", "--channel=c", address, "--nsqd-http-address=127.0.0.1:1")
    assert down.returncode == 1
    assert "ERROR: failed to get topic producers - " in down.stderr and "127.0.0.1:1" in down.stderr


def test_stops_on_sigint(nsqds):
    utility = Utility("nsq_stat", "--topic=stat", "--channel=c", f"--nsqd-http-address=127.0.0.1:{nsqds[1].http_port}",
                      "--interval=100ms")
    try:
        utility.wait_for_lines(4)
        assert utility.stop(signal.SIGINT) == 0
    finally:
        utility.kill()
    assert numbers(utility.stdout[2].decode().rstrip("\n"))[2:] == [2, 2, 0, 0, 0, 0, 0, 2, 0]
