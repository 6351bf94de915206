"""nsq_to_nsq end to end: the console script relaying topics between real nsqd processes."""

import json
import signal

import pytest

from nsqutils import json_filter

from .helpers import NsqdProcess, RawClient
from .utils_helpers import (Utility, assert_all_fatal, assert_go_usage, channel_stats, publish, run_script, run_scripts,
                            topic_stats, wait_until)

USAGE = """\
  -channel string
    \tnsq channel (default "nsq_to_nsq")
  -consumer-opt value
    \toption to passthrough to nsq.Consumer (may be given multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)
  -destination-nsqd-tcp-address value
    \tdestination nsqd TCP address (may be given multiple times)
  -destination-topic string
    \tuse this destination topic for all consumed topics (default is consumed topic name)
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -max-in-flight int
    \tmax number of messages to allow in flight (default 200)
  -mode string
    \tthe upstream request mode options: round-robin, hostpool (default), epsilon-greedy (default "hostpool")
  -nsqd-tcp-address value
    \tnsqd TCP address (may be given multiple times)
  -producer-opt value
    \toption to passthrough to nsq.Producer (may be given multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)
  -require-json-field string
    \tfor JSON messages: only pass messages that contain this field
  -require-json-value string
    \tfor JSON messages: only pass messages in which the required field has this value
  -status-every int
    \tthe # of requests between logging status (per destination), 0 disables (default 250)
  -topic value
    \tnsq topic (may be given multiple times)
  -version
    \tprint version string
  -whitelist-json-field value
    \tfor JSON messages: pass this field (may be given multiple times)
"""
FAST_RETRY = ["--consumer-opt=default_requeue_delay,0", "--consumer-opt=max_backoff_duration,50ms"]


@pytest.fixture(scope="module")
def nsqds(tmp_path_factory):
    """A source and two destinations."""
    procs = [NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}") for _ in range(3)]
    yield procs
    for proc in procs:
        proc.stop()


async def read_bodies(nsqd: NsqdProcess, topic: str, count: int) -> list[bytes]:
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub(topic, "check", rdy=count)
    bodies = [(await client.read_message()).body for _ in range(count)]
    await client.close()
    return bodies


def handled(nsqd: NsqdProcess, topic: str, count: int) -> bool:
    """``count`` messages taken by the relay's channel, and all of them finished."""
    stats = channel_stats(nsqd.http_port, topic, "nsq_to_nsq") or {}
    return (stats.get("message_count"), stats.get("depth"), stats.get("in_flight_count")) == (count, 0, 0)


def relay(*args: str) -> Utility:
    return Utility("nsq_to_nsq", *args)


def stop(utility: Utility, signum: int = signal.SIGTERM) -> None:
    try:
        assert utility.stop(signum) == 0, "".join(utility.stderr)
    finally:
        utility.kill()


def test_help_version_and_bad_flags():
    runs = run_scripts("nsq_to_nsq", ["-h"], ["-version"], ["-status-every", "often"])
    assert_go_usage(runs[0], "nsq_to_nsq", USAGE)
    version = runs[1]
    assert (version.returncode, version.stdout) == (0, "nsq_to_nsq v1.3.0\n")
    bad = runs[2]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "often" for flag -status-every: parse error\nUsage of nsq_to_nsq:\n')


def test_fatal_checks():
    source = "--nsqd-tcp-address=127.0.0.1:1"
    assert_all_fatal("nsq_to_nsq", [
        ([source], "--topic and --channel are required"),
        (["--topic=bad topic"], "--topic is invalid"),
        (["--topic=t", "--destination-topic=a/b"], "--destination-topic is invalid"),
        (["--topic=t", "--channel=c!"], "--channel is invalid"),
        (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required"),
        (["--topic=t", source], "--destination-nsqd-tcp-address required"),
    ])


async def test_relays_several_topics_under_their_own_names(nsqds):
    source, destination = nsqds[0], nsqds[1]
    publish(source.http_port, "relay_a", b"a1", b"a2")
    publish(source.http_port, "relay_b", b"b1")
    utility = relay("-topic", "relay_a", "-topic", "relay_b", "-nsqd-tcp-address", source.tcp_address,
                    "-destination-nsqd-tcp-address", destination.tcp_address)
    wait_until(lambda: sum((topic_stats(destination.http_port, t) or {}).get("message_count", 0)
                           for t in ("relay_a", "relay_b")) == 3, what="3 messages relayed")
    stop(utility, signal.SIGINT)
    assert await read_bodies(destination, "relay_a", 2) == [b"a1", b"a2"]
    assert await read_bodies(destination, "relay_b", 1) == [b"b1"]
    for topic in ("relay_a", "relay_b"):
        stats = channel_stats(source.http_port, topic, "nsq_to_nsq")
        assert (stats["depth"], stats["in_flight_count"]) == (0, 0)


def test_round_robin_into_one_destination_topic(nsqds):
    source, *destinations = nsqds
    publish(source.http_port, "relay_rr", b"1", b"2", b"3", b"4")
    utility = relay("--topic=relay_rr", f"--nsqd-tcp-address={source.tcp_address}", "--destination-topic=merged",
                    "--mode=round-robin", *[f"--destination-nsqd-tcp-address={d.tcp_address}" for d in destinations])
    wait_until(lambda: all((topic_stats(d.http_port, "merged") or {}).get("message_count") == 2 for d in destinations),
               what="2 messages on each destination")
    stop(utility)


async def test_json_rules_filter_and_reshape(nsqds):
    source, destination = nsqds[0], nsqds[1]
    publish(source.http_port, "relay_json", b'{"kind":"keep","id":1,"extra":true}', b'{"kind":"drop","id":2}',
            b"not json", b'{"kind":"keep","id":3.0,"note":"<b>"}')
    utility = relay("--topic=relay_json", f"--nsqd-tcp-address={source.tcp_address}",
                    f"--destination-nsqd-tcp-address={destination.tcp_address}", "--destination-topic=kept",
                    "--require-json-field=kind", "--require-json-value=keep", "--whitelist-json-field=id",
                    "--whitelist-json-field=kind", "--whitelist-json-field=note")
    wait_until(lambda: handled(source, "relay_json", 4), what="every message handled")
    stop(utility)
    assert await read_bodies(destination, "kept", 2) == [b'{"id":1,"kind":"keep"}',
                                                        b'{"id":3,"kind":"keep","note":"\\u003cb\\u003e"}']
    assert topic_stats(destination.http_port, "kept")["message_count"] == 2
    assert "ERROR: Unable to decode json: not json" in "".join(utility.stderr)


def test_json_rules():
    assert json_filter.check({"n": 3.0}, "n", "3") == (True, False)
    assert json_filter.check({"n": "3"}, "n", "3.0") == (False, False)
    assert json_filter.check({"n": True}, "n", "true") == (False, False)
    assert json_filter.check({}, "n", "") == (False, False)
    assert json_filter.check({}, "n", "x") == (False, True)
    assert json_filter.check({"n": None}, "n", "") == (True, False)
    assert json.loads(json_filter.whitelisted({"b": 2.5, "a": [1], "c": 0}, ["b", "a", "z"])) == {"a": [1], "b": 2.5}


def test_hostpool_passes_over_a_destination_that_fails(nsqds):
    source, destination = nsqds[0], nsqds[2]
    publish(source.http_port, "relay_pool", b"x", b"y", b"z")
    utility = relay("--topic=relay_pool", f"--nsqd-tcp-address={source.tcp_address}",
                    "--destination-nsqd-tcp-address=127.0.0.1:1",
                    f"--destination-nsqd-tcp-address={destination.tcp_address}",
                    *FAST_RETRY)
    wait_until(lambda: (topic_stats(destination.http_port, "relay_pool") or {}).get("message_count") == 3,
               what="every message at the live destination")
    stop(utility)
    assert channel_stats(source.http_port, "relay_pool", "nsq_to_nsq")["requeue_count"] >= 1
