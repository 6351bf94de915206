"""to_nsq end to end: the console script publishing stdin to real nsqd processes."""

import signal
import subprocess
import time

import pytest

from .helpers import NsqdProcess, RawClient
from .utils_helpers import (Utility, assert_all_fatal, assert_go_usage, channel_stats, publish, run_script, run_scripts,
                            topic_stats, wait_until)

USAGE = """\
  -delimiter string
    \tcharacter to split input from stdin (default "\\n")
  -nsqd-tcp-address value
    \tdestination nsqd TCP address (may be given multiple times)
  -producer-opt value
    \toption to passthrough to nsq.Producer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)
  -rate int
    \tThrottle messages to n/second. 0 to disable
  -topic string
    \tNSQ topic to publish to
  -version
    \tprint version string
"""


@pytest.fixture(scope="module")
def nsqds(tmp_path_factory):
    procs = [NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}") for _ in range(2)]
    yield procs
    for proc in procs:
        proc.stop()


async def read_bodies(nsqd: NsqdProcess, topic: str, count: int) -> list[bytes]:
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub(topic, "check", rdy=count)
    bodies = [(await client.read_message()).body for _ in range(count)]
    await client.close()
    return bodies


def test_help_version_and_bad_flags():
    runs = run_scripts("to_nsq",
                       ["-h"], ["--help"], ["--version"], ["-rate=fast"], ["--topics", "t"], ["-topic"],
                       ["--producer-opt=max_in_flight,-1"])
    assert_go_usage(runs[0], "to_nsq", USAGE)
    assert runs[1].returncode == 0
    version = runs[2]
    assert (version.returncode, version.stdout) == (0, "to_nsq v1.3.0\n")
    bad = runs[3]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "fast" for flag -rate: parse error\nUsage of to_nsq:\n')
    unknown = runs[4]
    assert (unknown.returncode, unknown.stderr.splitlines()[0]) == (2, "flag provided but not defined: -topics")
    missing = runs[5]
    assert (missing.returncode, missing.stderr.splitlines()[0]) == (2, "flag needs an argument: -topic")
    opt = runs[6]
    assert opt.returncode == 2
    assert opt.stderr.splitlines()[0] == ('invalid value "max_in_flight,-1" for flag -producer-opt: '
                                          'invalid max_in_flight ! -1 < 0')


def test_fatal_checks(nsqds):
    assert_all_fatal("to_nsq", [
        (["--nsqd-tcp-address=127.0.0.1:1"], "--topic required"),
        (["--topic=t", "--delimiter=ab"], "--delimiter must be a single byte"),
        (["--topic=t"], "--nsqd-tcp-address required"),
    ])
    refused = run_script("to_nsq", "-topic", "bad topic!", "-nsqd-tcp-address", nsqds[0].tcp_address, input=b"x\n")
    assert refused.returncode == 1
    assert "E_BAD_TOPIC" in refused.stderr.splitlines()[-1]


async def test_publishes_each_line_to_every_nsqd_with_go_style_flags(nsqds):
    lines = b"first\nsecond\n\nthird line\nlast without newline"
    result = run_script("to_nsq", "-topic", "lines", "-nsqd-tcp-address", nsqds[0].tcp_address,
                        f"-nsqd-tcp-address={nsqds[1].tcp_address}", input=lines)
    assert (result.returncode, result.stdout) == (0, "")
    for nsqd in nsqds:
        assert await read_bodies(nsqd, "lines", 4) == [b"first", b"second", b"third line", b"last without newline"]


async def test_delimiter_and_rate(nsqds):
    started = time.monotonic()
    result = run_script("to_nsq", "--topic=csv", f"--nsqd-tcp-address={nsqds[0].tcp_address}", "--delimiter=,",
                        "--rate=20", input=b"a,b,c,d,e,f,g,h,i,j")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "Throttling messages rate to max:20/second" in result.stderr
    assert elapsed > 0.4  # 10 messages at 20/s, starting with one token
    assert await read_bodies(nsqds[0], "csv", 10) == [bytes([c]) for c in b"abcdefghij"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_after_what_was_read_is_published(nsqds, signum):
    topic = f"open_{signum}"
    utility = Utility("to_nsq", "--topic", topic, "--nsqd-tcp-address", nsqds[0].tcp_address, stdin=subprocess.PIPE)
    try:
        utility.proc.stdin.write(b"one\ntwo\nthree\n")
        utility.proc.stdin.flush()
        wait_until(lambda: (topic_stats(nsqds[0].http_port, topic) or {}).get("message_count") == 3,
                   what="3 messages published")
        assert utility.stop(signum) == 0
    finally:
        utility.kill()
    assert channel_stats(nsqds[0].http_port, topic, "none") is None
    assert topic_stats(nsqds[0].http_port, topic)["message_count"] == 3
