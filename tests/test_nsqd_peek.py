"""Peek at a channel's backlog (beyond NSQ: --enable-peek, GET /channel/peek, nsqd/peek.py): the next
queued messages, memory then disk, in delivery order, untouched. Against a real nsqd process shared by
the module (each test its own topic) whose memory queues hold 5 messages and whose disk queue files
roll every few records, so a peek crosses files; the flag's absence and --http-auth-required in process."""

import base64
import struct

import httpx
import pytest
import trio

from .auth_helpers import auth_server  # noqa: F401 (a fixture)
from .helpers import NsqdProcess, RawClient
from .waiting import wait_until

MEMORY = 5


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    proc = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", "--enable-peek",
                       f"--mem-queue-size={MEMORY}", "--max-bytes-per-file=300")
    yield proc
    assert proc.stop() == 0


def url(nsqd, path: str) -> str:
    return f"http://127.0.0.1:{nsqd.http_port}{path}"


def publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
    answer = httpx.post(url(nsqd, "/mpub"), params={"topic": topic, "binary": "true"}, content=payload)
    assert answer.status_code == 200, answer.text


def make_channel(nsqd, topic: str, channel: str = "c") -> None:
    for path in ("/topic/create", "/channel/create"):
        assert httpx.post(url(nsqd, path), params={"topic": topic, "channel": channel}).status_code == 200


def peek_at(nsqd, topic: str, channel: str = "c", **params) -> dict:
    answer = httpx.get(url(nsqd, "/channel/peek"), params={"topic": topic, "channel": channel, **params})
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    return answer.json()


def bodies_of(answer: dict) -> list[bytes]:
    return [base64.b64decode(message["body"]) for message in answer["messages"]]


async def receive_all(nsqd, topic: str, count: int) -> list:
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub(topic, "c", rdy=count)
    messages = [await client.read_message() for _ in range(count)]
    await client.send(b"".join(b"FIN " + msg.id + b"\n" for msg in messages))
    await client.close()
    return messages


async def test_memory_then_disk_in_delivery_order_and_nothing_taken(nsqd):
    make_channel(nsqd, "ordered")
    sent = [b"message %02d " % i + b"x" * 20 for i in range(20)]
    publish(nsqd, "ordered", sent)
    first = peek_at(nsqd, "ordered", n="100")
    assert bodies_of(first) == sent
    assert [m["queue"] for m in first["messages"]] == ["memory"] * MEMORY + ["disk"] * (20 - MEMORY)
    assert {(m["attempts"], m["size"], m["truncated"]) for m in first["messages"]} == {(0, 31, False)}
    assert (first["depth"], first["backend_depth"], first["in_flight_count"]) == (20, 15, 0)
    assert peek_at(nsqd, "ordered", n="100") == first  # a peek moves nothing
    assert bodies_of(peek_at(nsqd, "ordered", n="7")) == sent[:7]
    received = await receive_all(nsqd, "ordered", 20)
    assert [msg.id.decode() for msg in received] == [m["id"] for m in first["messages"]]
    assert [msg.timestamp for msg in received] == [m["timestamp"] for m in first["messages"]]
    assert [msg.attempts for msg in received] == [1] * 20  # the peek's 0 was deliveries so far
    assert wait_until(lambda: peek_at(nsqd, "ordered")["messages"] == [], what="the channel drained")


async def test_a_requeued_message_shows_where_and_with_the_attempts_it_will_come(nsqd):
    make_channel(nsqd, "requeued")
    sent = [b"r%d" % i for i in range(8)]
    publish(nsqd, "requeued", sent)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("requeued", "c", rdy=1)
    taken = await client.read_message()
    await client.send(b"RDY 0\nREQ " + taken.id + b" 0\n")
    def requeued():
        answer = peek_at(nsqd, "requeued")
        return answer if len(answer["messages"]) == 8 else None

    answer = wait_until(requeued, what="the REQ'd message queued again")
    # memory had room again: the REQ'd message is delivered after memory's four, before the disk's three
    assert bodies_of(answer) == sent[1:5] + [b"r0"] + sent[5:]
    assert [m["attempts"] for m in answer["messages"]] == [0] * 4 + [1] + [0] * 3
    assert answer["in_flight_count"] == 0
    await client.close()
    received = await receive_all(nsqd, "requeued", 8)
    assert [msg.id.decode() for msg in received] == [m["id"] for m in answer["messages"]]


def test_in_flight_and_deferred_are_counted_not_shown(nsqd):
    make_channel(nsqd, "deferred")
    assert httpx.post(url(nsqd, "/pub"), params={"topic": "deferred", "defer": "60000"}, content=b"later").status_code == 200
    publish(nsqd, "deferred", [b"now"])
    answer = wait_until(lambda: (a := peek_at(nsqd, "deferred"))["deferred_count"] == 1 and a)
    assert bodies_of(answer) == [b"now"] and answer["depth"] == 1


def test_bodies_are_cut_to_max_body_and_binary_survives(nsqd):
    make_channel(nsqd, "binary")
    big, binary = bytes(range(256)) * 4, b"\xff\x00\xfe"
    publish(nsqd, "binary", [big, binary] + [b"pad"] * MEMORY)  # the last ones on disk
    publish(nsqd, "binary", [big, binary])
    answer = peek_at(nsqd, "binary", n="100", max_body="100")
    memory, disk = answer["messages"][:2], answer["messages"][-2:]
    assert [m["queue"] for m in disk] == ["disk", "disk"]
    for part in (memory, disk):
        assert [base64.b64decode(m["body"]) for m in part] == [big[:100], binary]
        assert [(m["size"], m["truncated"]) for m in part] == [(1024, True), (3, False)]
    assert {m["body"] for m in peek_at(nsqd, "binary", max_body="0")["messages"]} == {""}
    assert base64.b64decode(peek_at(nsqd, "binary")["messages"][0]["body"]) == big  # 4096 by default


@pytest.mark.parametrize("params, status, message", [
    ({"channel": "c"}, 400, "MISSING_ARG_TOPIC"),
    ({"topic": "bad!", "channel": "c"}, 400, "INVALID_ARG_TOPIC"),
    ({"topic": "errors"}, 400, "MISSING_ARG_CHANNEL"),
    ({"topic": "nope", "channel": "c"}, 404, "TOPIC_NOT_FOUND"),
    ({"topic": "errors", "channel": "nope"}, 404, "CHANNEL_NOT_FOUND"),
    ({"topic": "errors", "channel": "c", "n": "1000000000"}, 400, "INVALID_ARG_N"),
    ({"topic": "errors", "channel": "c", "n": "101"}, 400, "INVALID_ARG_N"),
    ({"topic": "errors", "channel": "c", "n": "0"}, 400, "INVALID_ARG_N"),
    ({"topic": "errors", "channel": "c", "n": "-1"}, 400, "INVALID_ARG_N"),
    ({"topic": "errors", "channel": "c", "n": "abc"}, 400, "INVALID_ARG_N"),
    ({"topic": "errors", "channel": "c", "max_body": "16385"}, 400, "INVALID_ARG_MAX_BODY"),
    ({"topic": "errors", "channel": "c", "max_body": "1e3"}, 400, "INVALID_ARG_MAX_BODY"),
])
def test_bad_requests_get_nsq_style_errors(nsqd, params, status, message):
    make_channel(nsqd, "errors")
    answer = httpx.get(url(nsqd, "/channel/peek"), params=params)
    assert (answer.status_code, answer.json()) == (status, {"message": message})


def test_post_is_method_not_allowed(nsqd):
    answer = httpx.post(url(nsqd, "/channel/peek"), params={"topic": "errors", "channel": "c"})
    assert (answer.status_code, answer.json()) == (405, {"message": "METHOD_NOT_ALLOWED"})


async def test_peeks_while_a_consumer_drains_see_the_order_of_the_moment(nsqd):
    """Files are read to their end and removed while peeks read them: every answer is whole and in order."""
    make_channel(nsqd, "racing")
    sent = [b"%05d" % i for i in range(3000)]
    for start in range(0, len(sent), 500):
        publish(nsqd, "racing", sent[start:start + 500])
    answers = []

    async def peek_repeatedly(done: trio.Event) -> None:
        async with httpx.AsyncClient() as http:
            while not done.is_set():
                answer = await http.get(url(nsqd, "/channel/peek"), params={"topic": "racing", "channel": "c", "n": "100"})
                assert answer.status_code == 200, answer.text
                answers.append(bodies_of(answer.json()))

    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peek_repeatedly, done)
        client = await RawClient.connect(nsqd.tcp_port)
        await client.sub("racing", "c", rdy=50)
        for _ in range(len(sent)):
            msg = await client.read_message()
            await client.send(b"FIN " + msg.id + b"\n")
        done.set()
        await client.close()
    assert len(answers) > 1
    for bodies in answers:
        numbers = [int(body) for body in bodies]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))) if numbers else True, numbers


async def test_without_the_flag_the_route_does_not_exist(start_nsqd):
    nsqd = await start_nsqd()
    nsqd.get_topic("t").get_channel("c")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        answer = await http.get("/channel/peek?topic=t&channel=c")
    assert (answer.status_code, answer.json()) == (404, {"message": "NOT_FOUND"})


async def test_with_http_auth_a_peek_needs_subscribe_on_the_channel(start_nsqd, auth_server):
    auth_server.answers["billing"] = (200, {"ttl": 3600, "identity": "carol", "authorizations": [
        {"permissions": ["subscribe"], "topic": "^orders$", "channels": ["^billing$"]}]}, 0)
    nsqd = await start_nsqd(auth_http_address=[auth_server.address], http_auth_required=True, enable_peek=True)
    for channel in ("billing", "shipping"):
        nsqd.get_topic("orders").get_channel(channel)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        anonymous = await http.get("/channel/peek?topic=orders&channel=billing")
        allowed = await http.get("/channel/peek?topic=orders&channel=billing", headers={"Authorization": "Bearer billing"})
        refused = await http.get("/channel/peek?topic=orders&channel=shipping", headers={"Authorization": "Bearer billing"})
    assert (anonymous.status_code, anonymous.json()) == (401, {"message": "AUTH_REQUIRED"})
    assert allowed.status_code == 200 and allowed.json()["messages"] == []
    assert (refused.status_code, refused.json()) == (403, {"message": "FORBIDDEN"})
