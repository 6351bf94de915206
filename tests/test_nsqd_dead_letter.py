"""Dead-letter topics (--max-attempts, --dead-letter-topic, POST /channel/max_attempts) against real
nsqd processes, with pynsq consumers where a client consumes: a message delivered max_attempts times is
published to the dead-letter topic in the documented envelope instead of being delivered again."""

import json
import time

import httpx
import nsq
import pytest

from common.goflags import FlagError
from nsqd.options import default_options

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, go_encoding, go_metadata, nsqd_dat, publish, receive, restart, subscribe
from .helpers import RawClient
from .test_pynsq_interop import publish as pynsq_publish
from .test_pynsq_interop import reader, tornado_loop, writer  # noqa: F401 (tornado_loop is a fixture)


def stats(server: Server, topic: str) -> dict | None:
    document = httpx.get(f"{server.http}/stats", params={"format": "json", "topic": topic}).json()
    return (document["topics"] or [None])[0]


def channel_stats(server: Server, topic: str, channel: str) -> dict:
    return next(c for c in stats(server, topic)["channels"] if c["channel_name"] == channel)


def post(server: Server, path: str, **params) -> httpx.Response:
    return httpx.post(f"{server.http}{path}", params=params)


def split_letter(body: bytes) -> tuple[dict, bytes]:
    """A dead letter as any consumer reads it: the JSON line, and the original body after it."""
    line, newline, original = body.partition(b"\n")
    assert newline
    return json.loads(line), original


async def requeue_until_dead(server: Server, topic: str, channel: str, deliveries: int, dead: bool = True):
    """Consume ``channel`` and REQ every delivery, ``deliveries`` times; then (if ``dead``) no more
    comes. The messages seen, one per delivery."""
    client = await subscribe(server.tcp_port, topic, channel, rdy=1)
    seen = []
    for _ in range(deliveries):
        [message] = await receive(client, 1)
        seen.append(message)
        await client.send(b"REQ " + message.id + b" 0\n")
    if dead:
        await client.assert_no_frame(0.5)
    await client.close()
    return seen


def test_pynsq_consumer_that_always_fails_sends_the_message_to_the_dead_letter_topic(tornado_loop, tmp_path):
    server = Server(tmp_path, "--max-attempts=3")
    w = writer(tornado_loop, server)
    pynsq_publish(tornado_loop, w.pub, "orders", b"poison \x00\xff bytes")
    attempts, letters = [], []

    def fail(message: nsq.Message):
        message.enable_async()
        attempts.append((message.attempts, message.id, message.timestamp))
        message.requeue(delay=0, backoff=False)

    def keep(message: nsq.Message) -> bool:
        letters.append(message.body)
        return True

    reader(tornado_loop, server, "orders", "billing", fail, max_in_flight=1, max_tries=0)
    tornado_loop.run_until(lambda: len(attempts) >= 3, timeout=10)
    reader(tornado_loop, server, "orders.dead", "ops", keep)
    tornado_loop.run_until(lambda: letters, timeout=10)
    tornado_loop.run_for(0.3)
    assert [a for a, _, _ in attempts] == [1, 2, 3]  # never a fourth delivery
    envelope, original = split_letter(letters[0])
    _, msg_id, timestamp = attempts[0]
    assert original == b"poison \x00\xff bytes"
    assert list(envelope) == ["topic", "channel", "id", "attempts", "first_seen", "dead_lettered_at"]
    assert (envelope["topic"], envelope["channel"], envelope["id"], envelope["attempts"]) == (
        "orders", "billing", msg_id.decode(), 3)
    assert envelope["first_seen"] == timestamp <= envelope["dead_lettered_at"] <= time.time_ns()
    billing = channel_stats(server, "orders", "billing")
    assert (billing["max_attempts"], billing["dead_letter_topic"], billing["dead_letter_count"]) == (3, "orders.dead", 1)
    assert (billing["depth"], billing["in_flight_count"]) == (0, 0)
    assert "max_attempts" not in channel_stats(server, "orders.dead", "ops")  # a dead-letter topic's own channels
    metrics = httpx.get(f"{server.http}/metrics").text
    assert 'nsq_channel_dead_letters_total{topic="orders",channel="billing"} 1' in metrics
    assert 'nsq_channel_max_attempts{topic="orders",channel="billing"} 3' in metrics
    assert server.stop() == 0


async def test_timeouts_and_a_restart_count_as_deliveries(tmp_path):
    server = Server(tmp_path, "--max-attempts=2")
    client = await RawClient.connect(server.tcp_port)
    await client.identify(msg_timeout=1000)
    await client.sub("jobs", "slow", rdy=1)
    await publish(server.tcp_port, "jobs", [b"never finished"])
    first = await client.read_message(timeout=3)
    second = await client.read_message(timeout=3)  # after the first timed out
    assert (first.attempts, second.attempts) == (1, 2)
    await client.assert_no_frame(1.5)  # the second timed out too: dead-lettered, not delivered
    assert channel_stats(server, "jobs", "slow")["timeout_count"] == 2
    assert stats(server, "jobs.dead")["depth"] == 1
    await client.close()

    await publish(server.tcp_port, "jobs", [b"kept over a restart"])
    client = await subscribe(server.tcp_port, "jobs", "slow", rdy=1)
    [held] = await receive(client, 1)
    await client.send(b"REQ " + held.id + b" 60000\n")  # deferred, so on disk with attempts 1 at the stop
    await client.close()
    server = restart(server, "--max-attempts=1")  # already at the limit
    consumer = await subscribe(server.tcp_port, "jobs", "slow", rdy=5)
    await consumer.assert_no_frame(0.5)
    letters = await subscribe(server.tcp_port, "jobs.dead", "ops", rdy=5)
    bodies = [split_letter(m.body) for m in await receive(letters, 2)]
    assert sorted(original for _, original in bodies) == [b"kept over a restart", b"never finished"]
    assert {envelope["id"] for envelope, _ in bodies} >= {held.id.decode()}
    assert server.stop() == 0


async def test_per_channel_limit_over_http_and_other_channels_unaffected(tmp_path):
    server = Server(tmp_path)
    for channel in ("strict", "lenient"):
        assert post(server, "/topic/create", topic="events").status_code == 200
        assert post(server, "/channel/create", topic="events", channel=channel).status_code == 200
    assert post(server, "/channel/max_attempts", topic="events", channel="strict", max_attempts="1").status_code == 200
    await publish(server.tcp_port, "events", [b"e"])
    assert len(await requeue_until_dead(server, "events", "strict", 1)) == 1
    assert len(await requeue_until_dead(server, "events", "lenient", 4, dead=False)) == 4  # no limit
    assert "max_attempts" not in channel_stats(server, "events", "lenient")
    assert channel_stats(server, "events", "strict")["dead_letter_count"] == 1
    assert post(server, "/channel/max_attempts", topic="events", channel="strict", max_attempts="default").status_code == 200
    strict = channel_stats(server, "events", "strict")
    assert (strict["max_attempts"], strict["dead_letter_count"]) == (0, 1)  # the count stays shown
    assert server.stop() == 0


@pytest.mark.parametrize("params, status, message", [
    ({"channel": "c", "max_attempts": "1"}, 400, "MISSING_ARG_TOPIC"),
    ({"topic": "t", "max_attempts": "1"}, 400, "MISSING_ARG_CHANNEL"),
    ({"topic": "t", "channel": "nope", "max_attempts": "1"}, 404, "CHANNEL_NOT_FOUND"),
    ({"topic": "t", "channel": "c"}, 400, "MISSING_ARG_MAX_ATTEMPTS"),
    ({"topic": "t", "channel": "c", "max_attempts": "-1"}, 400, "INVALID_ARG_MAX_ATTEMPTS"),
    ({"topic": "t", "channel": "c", "max_attempts": "65536"}, 400, "INVALID_ARG_MAX_ATTEMPTS"),
    ({"topic": "t", "channel": "c", "max_attempts": "three"}, 400, "INVALID_ARG_MAX_ATTEMPTS"),
])
async def test_bad_max_attempts_requests(start_nsqd, params, status, message):
    nsqd = await start_nsqd()
    nsqd.get_topic("t").get_channel("c")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        answer = await http.post("/channel/max_attempts", params=params)
        assert (answer.status_code, answer.json()) == (status, {"message": message})


async def test_a_channel_limit_is_kept_in_nsqd_dat_which_nsq_still_reads(tmp_path):
    server = Server(tmp_path)
    assert post(server, "/topic/create", topic="orders").status_code == 200
    for channel in ("billing", "audit"):
        assert post(server, "/channel/create", topic="orders", channel=channel).status_code == 200
    assert post(server, "/channel/max_attempts", topic="orders", channel="billing", max_attempts="5").status_code == 200
    saved = (b'{"topics":[{"name":"orders","paused":false,"channels":[{"name":"billing","paused":false,'
             b'"max_attempts":5},{"name":"audit","paused":false}]}],"version":"1.3.0"}')
    assert nsqd_dat(tmp_path) == saved
    expected = [("orders", False, [("billing", False), ("audit", False)])]
    assert go_metadata(saved) == expected
    server = restart(server)
    assert channel_stats(server, "orders", "billing")["max_attempts"] == 5
    assert server.stop() == 0
    (tmp_path / "nsqd.dat").write_bytes(go_encoding(expected))  # as NSQ v1.3 writes it back
    server = Server(tmp_path)
    assert "max_attempts" not in channel_stats(server, "orders", "billing")
    assert server.stop() == 0


async def test_ephemeral_channels_and_dead_letter_topics_are_left_alone(tmp_path):
    server = Server(tmp_path, "--max-attempts=1", "--msg-ttl=1h", "--dead-letter-topic=dlq.%s")
    await publish(server.tcp_port, "t", [b"x"])
    assert len(await requeue_until_dead(server, "t", "c", 1)) == 1
    assert stats(server, "dlq.t")["depth"] == 1
    assert "msg_ttl" not in stats(server, "dlq.t")  # --msg-ttl does not apply to dead letters
    assert len(await requeue_until_dead(server, "dlq.t", "ops", 3, dead=False)) == 3  # nor --max-attempts
    tail = await subscribe(server.tcp_port, "t", "tail#ephemeral", rdy=1)
    await publish(server.tcp_port, "t", [b"y"])
    for attempt in (1, 2, 3):
        [message] = await receive(tail, 1)
        assert message.attempts == attempt
        await tail.send(b"REQ " + message.id + b" 0\n")
    await tail.close()
    assert server.stop() == 0


async def test_a_message_too_large_for_its_envelope_is_delivered_again(tmp_path):
    server = Server(tmp_path, "--max-attempts=1", "--max-msg-size=400")
    await publish(server.tcp_port, "big", [b"b" * 400, b"small"])
    client = await subscribe(server.tcp_port, "big", "c", rdy=2)
    first = await receive(client, 2)
    await client.send(b"".join(b"REQ " + m.id + b" 0\n" for m in first))
    [again] = await receive(client, 1)
    assert (again.body, again.attempts) == (b"b" * 400, 2)
    await client.assert_no_frame(0.3)
    assert channel_stats(server, "big", "c")["dead_letter_count"] == 1  # "small" went
    assert "too large for a dead letter" in server.log()
    assert server.stop() == 0


async def test_long_topic_names_keep_their_dead_letter_topic_within_64_characters(tmp_path):
    name = "t" * 64
    server = Server(tmp_path, "--max-attempts=1")
    await publish(server.tcp_port, name, [b"x"])
    await requeue_until_dead(server, name, "c", 1)
    assert channel_stats(server, name, "c")["dead_letter_topic"] == "t" * 59 + ".dead"
    assert stats(server, "t" * 59 + ".dead")["depth"] == 1
    assert server.stop() == 0


@pytest.mark.parametrize("flags, error", [
    ({"dead_letter_topic": "dead"}, "must hold %s once"),
    ({"dead_letter_topic": "%s"}, "must hold %s once"),
    ({"dead_letter_topic": "%s.%s"}, "must hold %s once"),
    ({"dead_letter_topic": "%s#ephemeral"}, "valid non-ephemeral"),
    ({"dead_letter_topic": "%s dead"}, "valid non-ephemeral"),
    ({"max_attempts": 65536}, "--max-attempts must be in"),
    ({"max_attempts": -1}, "--max-attempts must be in"),
])
def test_bad_flags(flags, error):
    with pytest.raises(FlagError, match=error):
        default_options(**flags)
