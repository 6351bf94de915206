"""nsq_tail end to end: the console script consuming from real nsqd and nsqlookupd processes."""

import json
import re
import signal

import pytest

from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import (Utility, assert_all_fatal, assert_go_usage, channel_stats, http, publish, run_script,
                            run_scripts, wait_until)

USAGE = """\
  -channel string
    \tNSQ channel
  -consumer-opt value
    \toption to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -max-in-flight int
    \tmax number of messages to allow in flight (default 200)
  -n int
    \ttotal messages to show (will wait if starved)
  -nsqd-tcp-address value
    \tnsqd TCP address (may be given multiple times)
  -print-topic
    \tprint topic name where message was received
  -topic value
    \tNSQ topic (may be given multiple times)
  -version
    \tprint version string
"""


@pytest.fixture(scope="module")
def lookupd():
    proc = LookupdProcess()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory, lookupd):
    proc = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}",
                       f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--broadcast-address=127.0.0.1")
    yield proc
    proc.stop()


def test_help_version_and_bad_flags():
    runs = run_scripts("nsq_tail", ["-help"], ["-version"], ["-print-topic=maybe"], ["---topic=t"])
    assert_go_usage(runs[0], "nsq_tail", USAGE)
    version = runs[1]
    assert (version.returncode, version.stdout) == (0, "nsq_tail v1.3.0\n")
    bad = runs[2]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid boolean value "maybe" for -print-topic: parse error\nUsage of nsq_tail:\n')
    syntax = runs[3]
    assert (syntax.returncode, syntax.stderr.splitlines()[0]) == (2, "bad flag syntax: ---topic=t")


def test_fatal_checks():
    assert_all_fatal("nsq_tail", [
        (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1", "--lookupd-http-address=127.0.0.1:2"],
         "use --nsqd-tcp-address or --lookupd-http-address not both"),
        (["--nsqd-tcp-address=127.0.0.1:1"], "--topic required"),
        (["--topic=t", "--nsqd-tcp-address=127.0.0.1:1"], "failed to connect to nsqd at 127.0.0.1:1"),
    ])


def test_n_prints_that_many_bodies_finishes_them_and_exits(nsqd):
    publish(nsqd.http_port, "tail_n", b"one", b"two", b"three", b"four")
    result = run_script("nsq_tail", "-topic", "tail_n", "-channel", "c", "-nsqd-tcp-address", nsqd.tcp_address,
                        "-n", "3")
    assert (result.returncode, result.stdout) == (0, "one\ntwo\nthree\n"), result.stderr
    assert "Adding consumer for topic: tail_n" in result.stderr
    stats = channel_stats(nsqd.http_port, "tail_n", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["client_count"]) == (1, 0, 0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_print_topic_over_several_topics_until_a_signal(nsqd, signum):
    topics = [f"tail_a{signum}", f"tail_b{signum}"]
    utility = Utility("nsq_tail", "--print-topic", f"--topic={topics[0]}", f"--topic={topics[1]}",
                      f"--nsqd-tcp-address={nsqd.tcp_address}", "--channel=printed")
    try:
        utility.wait_for_stderr(f"Adding consumer for topic: {topics[1]}")
        wait_until(lambda: all(channel_stats(nsqd.http_port, t, "printed") for t in topics), what="subscriptions")
        publish(nsqd.http_port, topics[0], b"x1", b"x2")
        publish(nsqd.http_port, topics[1], b"y1")
        utility.wait_for_lines(3)
        assert utility.stop(signum) == 0
    finally:
        utility.kill()
    assert sorted(utility.stdout) == [f"{topics[0]} | x1\n".encode(), f"{topics[0]} | x2\n".encode(),
                                      f"{topics[1]} | y1\n".encode()]
    for topic in topics:
        stats = channel_stats(nsqd.http_port, topic, "printed")
        assert (stats["depth"], stats["in_flight_count"], stats["client_count"]) == (0, 0, 0)


def test_discovers_nsqd_through_lookupd_on_an_ephemeral_channel(nsqd, lookupd):
    publish(nsqd.http_port, "tail_lookup", b"found")
    utility = Utility("nsq_tail", "--topic=tail_lookup", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
                      "--n=2", "--consumer-opt=lookupd_poll_interval,1s")
    try:
        utility.wait_for_lines(1)
        assert re.fullmatch(r"tail\d{6}#ephemeral", channel_names(nsqd, "tail_lookup")[0])
        publish(nsqd.http_port, "tail_lookup", b"second")
        assert utility.wait() == 0
    finally:
        utility.kill()
    assert utility.stdout == [b"found\n", b"second\n"]
    wait_until(lambda: channel_names(nsqd, "tail_lookup") == [], what="the ephemeral channel to go")


def channel_names(nsqd, topic: str) -> list[str]:
    stats = json.loads(http(nsqd.http_port, f"/stats?format=json&topic={topic}"))
    return [row["channel_name"] for found in stats["topics"] for row in found["channels"] or []]
