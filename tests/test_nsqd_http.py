"""nsqd's HTTP API over real HTTP (NSQ v1.3's nsqd/http.go): routes, parameters, status codes, bodies
and headers, checked against the messages a TCP consumer then gets, /stats and nsqd.dat."""

import gc
import json
import logging
import os
import shutil
import struct
import weakref
from contextlib import asynccontextmanager

import h11
import httpx
import pytest
import trio

from .helpers import RawClient
from .waiting import await_until

V1 = "nsq; version=1.0"
JSON = "application/json; charset=utf-8"
LONG_NAME = "n" * 65


@asynccontextmanager
async def http_client(nsqd):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as client:
        yield client


@pytest.fixture
async def http(nsqd):
    async with http_client(nsqd) as client:
        yield client


def assert_error(response: httpx.Response, status: int, text: str) -> None:
    assert (response.status_code, response.content) == (status, b'{"message":"%s"}' % text.encode())
    assert response.headers["X-NSQ-Content-Type"] == V1
    assert response.headers["Content-Type"] == JSON


def assert_empty_ok(response: httpx.Response) -> None:
    assert (response.status_code, response.content) == (200, b"")
    assert response.headers["X-NSQ-Content-Type"] == V1


def binary_mpub(*bodies: bytes, count: int | None = None) -> bytes:
    head = struct.pack(">i", len(bodies) if count is None else count)
    return head + b"".join(struct.pack(">i", len(body)) + body for body in bodies)


async def consumer(nsqd, topic: str = "t", channel: str = "c", rdy: int = 10) -> RawClient:
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub(topic, channel, rdy=rdy)
    return client


async def receive(client: RawClient, count: int) -> list[bytes]:
    """The next ``count`` message bodies, each FINished."""
    bodies = []
    for _ in range(count):
        msg = await client.read_message()
        await client.send(b"FIN " + msg.id + b"\n")
        bodies.append(msg.body)
    return bodies


async def stats(http, **params) -> dict:
    response = await http.get("/stats", params={"format": "json", **params})
    assert response.status_code == 200
    return response.json()


async def topic_stats(http, name: str) -> dict:
    [topic] = [topic for topic in (await stats(http))["topics"] if topic["topic_name"] == name]
    return topic


async def channel_stats(http, topic: str, name: str) -> dict:
    [channel] = [channel for channel in (await topic_stats(http, topic))["channels"]
                 if channel["channel_name"] == name]
    return channel


def saved_metadata(nsqd) -> dict:
    """nsqd.dat as {topic: (paused, {channel: paused})}."""
    with open(os.path.join(nsqd.data_path, "nsqd.dat")) as handle:
        document = json.load(handle)
    return {topic["name"]: (topic["paused"], {channel["name"]: channel["paused"]
                                              for channel in topic["channels"] or []})
            for topic in document["topics"] or []}


async def wait_for_metadata(nsqd, expected: dict, timeout: float = 10.0) -> None:
    """Until nsqd.dat says ``expected`` (topic and channel changes are saved by a worker)."""
    await await_until(lambda: saved_metadata(nsqd) == expected, timeout, f"nsqd.dat saying {expected}")


async def raw_request(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes; everything nsqd answers until it closes the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    answer = b""
    try:
        await stream.send_all(data)
        with trio.fail_after(timeout):
            while chunk := await stream.receive_some(65536):
                answer += chunk
        return answer
    except trio.BrokenResourceError:
        return answer
    finally:
        await stream.aclose()


async def assert_http_healthy(nsqd) -> None:
    """A fresh HTTP client can still ping and publish."""
    async with http_client(nsqd) as http:
        response = await http.get("/ping")
        assert (response.status_code, response.text) == (200, "OK")
        assert (await http.post("/pub?topic=healthy", content=b"x")).status_code == 200


# -- /ping and /info ------------------------------------------------------------------


async def test_ping_answers_ok_as_plain_text(http):
    response = await http.get("/ping")
    assert (response.status_code, response.content) == (200, b"OK")
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert "X-NSQ-Content-Type" not in response.headers  # PlainText, not V1


async def test_debug_freememory_collects_the_garbage_in_reference_cycles(http):
    class Cycle:
        pass

    gc.disable()  # only the route collects
    try:
        garbage = Cycle()
        garbage.itself = garbage
        collected = weakref.ref(garbage)
        del garbage
        assert collected() is not None
        assert_empty_ok(await http.post("/debug/freememory"))
        assert collected() is None
    finally:
        gc.enable()
    assert_error(await http.get("/debug/freememory"), 405, "METHOD_NOT_ALLOWED")


async def test_ping_reports_a_disk_error_with_500_until_the_disk_works_again(start_nsqd):
    nsqd = await start_nsqd(mem_queue_size=0)  # every message goes to the disk queue
    async with http_client(nsqd) as http:
        shutil.rmtree(nsqd.data_path)
        try:
            assert_error(await http.post("/pub?topic=t", content=b"lost"), 503, "EXITING")
            response = await http.get("/ping")
            assert response.status_code == 500
            assert response.text.startswith("NOK - ")
            assert "no such file or directory" in response.text.lower()
            assert (await stats(http))["health"] == response.text
        finally:
            os.mkdir(nsqd.data_path)
        assert (await http.post("/pub?topic=t", content=b"kept")).status_code == 200
        response = await http.get("/ping")
        assert (response.status_code, response.text) == (200, "OK")
        assert (await stats(http))["health"] == "OK"


async def test_info_keys_types_and_values(start_nsqd):
    nsqd = await start_nsqd(max_heartbeat_interval=12.5, max_output_buffer_timeout=0.75,
                            max_output_buffer_size=32768)
    async with http_client(nsqd) as http:
        response = await http.get("/info")
    assert response.status_code == 200
    assert response.headers["X-NSQ-Content-Type"] == V1
    assert response.headers["Content-Type"] == JSON
    info = response.json()
    assert list(info) == ["version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
                          "max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
                          "max_deflate_level"]
    assert info["version"] == "1.3.0"
    assert isinstance(info["broadcast_address"], str) and isinstance(info["hostname"], str)
    assert (info["http_port"], info["tcp_port"]) == (nsqd.http_port, nsqd.tcp_port)
    assert info["start_time"] == nsqd.start_time and type(info["start_time"]) is int
    assert info["max_heartbeat_interval"] == 12_500_000_000  # time.Duration: nanoseconds
    assert info["max_output_buffer_timeout"] == 750_000_000
    assert info["max_output_buffer_size"] == 32768
    assert info["max_deflate_level"] == 6


# -- /pub ---------------------------------------------------------------------------------


async def test_pub_delivers_the_body_byte_for_byte(nsqd, http):
    client = await consumer(nsqd)
    body = b"hello\nworld\r\n\x00\xff" + bytes(range(256))
    response = await http.post("/pub?topic=t", content=body)
    assert (response.status_code, response.content) == (200, b"OK")
    assert response.headers["X-NSQ-Content-Type"] == V1
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert await receive(client, 1) == [body]
    assert (await topic_stats(http, "t"))["message_count"] == 1


async def test_pub_with_defer_delivers_after_the_delay(nsqd, http):
    client = await consumer(nsqd)
    started = trio.current_time()
    assert (await http.post("/pub?topic=t&defer=400", content=b"later")).status_code == 200
    assert (await channel_stats(http, "t", "c"))["deferred_count"] == 1
    await client.assert_no_frame(0.25)
    assert await receive(client, 1) == [b"later"]
    assert trio.current_time() - started >= 0.4
    assert (await channel_stats(http, "t", "c"))["deferred_count"] == 0


async def test_the_queue_scan_flags_change_nothing(start_nsqd):
    """README "Deliberate differences": NSQ with --queue-scan-selection-count=0 never delivers a
    deferred message nor times out one in flight; here each deadline has its own timer."""
    nsqd = await start_nsqd(queue_scan_selection_count=0, queue_scan_worker_pool_max=0, msg_timeout=0.3)
    client = await consumer(nsqd)
    async with http_client(nsqd) as http:
        assert (await http.post("/pub?topic=t&defer=100", content=b"later")).status_code == 200
        first = await client.read_message(timeout=5.0)
        again = await client.read_message(timeout=5.0)  # not FINished: its msg_timeout passed
    assert (first.body, again.body, again.attempts) == (b"later", b"later", 2)


async def test_pub_with_defer_zero_delivers_at_once(nsqd, http):
    client = await consumer(nsqd)
    assert (await http.post("/pub?topic=t&defer=0", content=b"now")).status_code == 200
    msg = await client.read_message(timeout=1.0)
    assert msg.body == b"now"


async def test_pub_refuses_an_empty_body_before_looking_at_the_topic(http):
    assert_error(await http.post("/pub?topic=t"), 400, "MSG_EMPTY")
    assert_error(await http.post("/pub?topic=bad!name"), 400, "MSG_EMPTY")
    assert (await stats(http))["topics"] == []


async def test_pub_message_too_big_by_content_length_and_by_body(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=100)
    client = await consumer(nsqd)

    async def chunked(size: int):
        yield b"x" * (size - 10)
        yield b"y" * 10

    async with http_client(nsqd) as http:
        assert_error(await http.post("/pub?topic=t", content=b"x" * 101), 413, "MSG_TOO_BIG")
        assert_error(await http.post("/pub?topic=t", content=chunked(101)), 413, "MSG_TOO_BIG")
        assert_error(await http.post("/pub?topic=bad!name", content=b"x" * 101), 413, "MSG_TOO_BIG")
        await client.assert_no_frame(0.1)
        assert (await http.post("/pub?topic=t", content=b"m" * 100)).status_code == 200
        assert (await http.post("/pub?topic=t", content=chunked(100))).status_code == 200
    assert await receive(client, 2) == [b"m" * 100, b"x" * 90 + b"y" * 10]


async def test_pub_declared_content_length_past_every_limit_is_refused_without_reading_the_body(nsqd):
    answer = await raw_request(nsqd.http_port, b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\n"
                                               b"Content-Length: 1000000000\r\n\r\nonly this much")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b'\r\n\r\n{"message":"MSG_TOO_BIG"}')
    await assert_http_healthy(nsqd)
    assert "t" not in nsqd.topics


@pytest.mark.parametrize("query", ["", "?", "?topics=t", "?Topic=t", "?channel=c"])
async def test_pub_missing_topic(http, query):
    assert_error(await http.post("/pub" + query, content=b"x"), 400, "MISSING_ARG_TOPIC")


@pytest.mark.parametrize("topic", ["", "bad!name", "a+b", "t%2Fx", LONG_NAME, "t%23ephemeralx", "%23ephemeral"])
async def test_pub_invalid_topic(http, topic):
    assert_error(await http.post(f"/pub?topic={topic}", content=b"x"), 400, "INVALID_TOPIC")
    assert (await stats(http))["topics"] == []


async def test_pub_query_is_decoded_as_go_decodes_it(nsqd, http):
    """%-escapes are decoded; the first of repeated parameters wins."""
    assert (await http.post("/pub?topic=%74%2E1&topic=other", content=b"x")).status_code == 200
    assert sorted(nsqd.topics) == ["t.1"]


@pytest.mark.parametrize("defer", ["abc", "1.5", "", "-1", "1e3", "0x10", "%205", "5%20", "1_0", "%D9%A3",
                                   "3600001", "99999999999999999999", "-99999999999999999999"])
async def test_pub_invalid_defer(http, defer):
    assert_error(await http.post(f"/pub?topic=t&defer={defer}", content=b"x"), 400, "INVALID_DEFER")


async def test_pub_defer_accepts_a_sign_as_strconv_does(nsqd, http):
    client = await consumer(nsqd)
    assert (await http.post("/pub?topic=t&defer=%2B10", content=b"x")).status_code == 200
    assert (await http.post("/pub?topic=t&defer=-0", content=b"y")).status_code == 200
    assert sorted(await receive(client, 2)) == [b"x", b"y"]


async def test_pub_defer_is_bounded_by_max_req_timeout(start_nsqd):
    nsqd = await start_nsqd(max_req_timeout=1.5)
    async with http_client(nsqd) as http:
        assert_error(await http.post("/pub?topic=t&defer=1501", content=b"x"), 400, "INVALID_DEFER")
        assert (await http.post("/pub?topic=t&defer=1500", content=b"x")).status_code == 200


@pytest.mark.parametrize("query", ["topic=t%zz", "topic=t%4", "topic=t;x", "topic=t&x=%", "a;b=1&topic=t",
                                   "topic=t&defer=%g0"])
async def test_pub_malformed_query_is_invalid_request(http, query):
    assert_error(await http.post(f"/pub?{query}", content=b"x"), 400, "INVALID_REQUEST")
    assert_error(await http.post(f"/mpub?{query}", content=b"x"), 400, "INVALID_REQUEST")


# -- /mpub --------------------------------------------------------------------------------


async def test_mpub_text_mode_splits_on_newlines_and_skips_empty_lines(nsqd, http):
    client = await consumer(nsqd)
    response = await http.post("/mpub?topic=t", content=b"one\ntwo\n\n\nthree\r\nfour\n")
    assert (response.status_code, response.content) == (200, b"OK")
    assert response.headers["X-NSQ-Content-Type"] == V1
    assert await receive(client, 4) == [b"one", b"two", b"three\r", b"four"]
    assert (await topic_stats(http, "t"))["message_count"] == 4


async def test_mpub_text_mode_with_no_message_is_ok(nsqd, http):
    client = await consumer(nsqd)
    for body in (b"", b"\n\n\n"):
        assert (await http.post("/mpub?topic=t", content=body)).status_code == 200
    await client.assert_no_frame(0.1)


@pytest.mark.parametrize("binary", ["false", "0"])
async def test_mpub_binary_false_is_text_mode(nsqd, http, binary):
    client = await consumer(nsqd)
    assert (await http.post(f"/mpub?topic=t&binary={binary}", content=b"a\nb")).status_code == 200
    assert await receive(client, 2) == [b"a", b"b"]


async def test_mpub_text_mode_message_too_big_publishes_nothing(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=10)
    client = await consumer(nsqd)
    async with http_client(nsqd) as http:
        assert_error(await http.post("/mpub?topic=t", content=b"short\n" + b"x" * 11 + b"\nlast"),
                     413, "MSG_TOO_BIG")
        await client.assert_no_frame(0.1)
        assert (await http.post("/mpub?topic=t", content=b"x" * 10 + b"\n" + b"y" * 10)).status_code == 200
    assert await receive(client, 2) == [b"x" * 10, b"y" * 10]


async def test_mpub_body_too_big(start_nsqd):
    nsqd = await start_nsqd(max_body_size=100, max_msg_size=50)
    client = await consumer(nsqd)

    async def chunked():
        yield b"x\n" * 50
        yield b"y\n"

    async with http_client(nsqd) as http:
        assert_error(await http.post("/mpub?topic=t", content=b"x\n" * 51), 413, "BODY_TOO_BIG")
        assert_error(await http.post("/mpub?topic=t", content=chunked()), 413, "BODY_TOO_BIG")
        assert_error(await http.post("/mpub?topic=t&binary=true", content=binary_mpub(b"x" * 48, b"y" * 48)),
                     413, "BODY_TOO_BIG")
        await client.assert_no_frame(0.1)
        assert (await http.post("/mpub?topic=t", content=b"x\n" * 50)).status_code == 200
    assert await receive(client, 50) == [b"x"] * 50


@pytest.mark.parametrize("binary", ["true", "1", "yes", "", "TRUE"])
async def test_mpub_binary_mode(nsqd, http, binary):
    """Any value other than true/1/false/0 also means binary (nsqd logs a warning)."""
    client = await consumer(nsqd)
    bodies = [b"a\nb", b"\x00\xff\n\n", b"x" * 1000]
    response = await http.post(f"/mpub?topic=t&binary={binary}", content=binary_mpub(*bodies))
    assert (response.status_code, response.content) == (200, b"OK")
    assert await receive(client, 3) == bodies


@pytest.mark.parametrize(("body", "text"), [
    (b"", "BAD_BODY"),
    (b"\x00\x00\x01", "BAD_BODY"),
    (binary_mpub(count=0), "BAD_BODY"),
    (binary_mpub(count=-1), "BAD_BODY"),
    (binary_mpub(b"x", count=2**31 - 1), "BAD_BODY"),
    (binary_mpub(b"x", count=2), "BAD_MESSAGE"),
    (binary_mpub(b"x", count=2) + b"\x00\x00", "BAD_MESSAGE"),
    (binary_mpub(b""), "BAD_MESSAGE"),
    (struct.pack(">ii", 1, -5) + b"x", "BAD_MESSAGE"),
    (struct.pack(">ii", 1, 10) + b"short", "BAD_MESSAGE"),
    (binary_mpub(b"ok", b"x" * 101), "BAD_MESSAGE"),
])
async def test_mpub_binary_malformed_bodies_publish_nothing(start_nsqd, body, text):
    nsqd = await start_nsqd(max_msg_size=100)
    client = await consumer(nsqd)
    async with http_client(nsqd) as http:
        assert_error(await http.post("/mpub?topic=t&binary=true", content=body), 413, text)
        await client.assert_no_frame(0.05)
        assert (await topic_stats(http, "t"))["message_count"] == 0


async def test_mpub_missing_and_invalid_topic(http):
    assert_error(await http.post("/mpub", content=b"x"), 400, "MISSING_ARG_TOPIC")
    assert_error(await http.post("/mpub?topic=bad!name", content=b"x"), 400, "INVALID_TOPIC")
    assert_error(await http.post(f"/mpub?topic={LONG_NAME}&binary=true", content=b""), 400, "INVALID_TOPIC")


# -- /topic/* -----------------------------------------------------------------------------


TOPIC_ROUTES = ["create", "delete", "empty", "pause", "unpause"]


@pytest.mark.parametrize("route", TOPIC_ROUTES)
async def test_topic_routes_common_errors(http, route):
    assert_error(await http.post(f"/topic/{route}"), 400, "MISSING_ARG_TOPIC")
    assert_error(await http.post(f"/topic/{route}?channel=t"), 400, "MISSING_ARG_TOPIC")
    assert_error(await http.post(f"/topic/{route}?topic=t%zz"), 400, "INVALID_REQUEST")
    assert_error(await http.post(f"/topic/{route}?topic=t;x"), 400, "INVALID_REQUEST")
    assert_error(await http.get(f"/topic/{route}?topic=t"), 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize(("route", "status", "text"), [
    ("create", 400, "INVALID_TOPIC"),
    ("empty", 400, "INVALID_TOPIC"),
    ("delete", 404, "TOPIC_NOT_FOUND"),  # these three do not validate the name
    ("pause", 404, "TOPIC_NOT_FOUND"),
    ("unpause", 404, "TOPIC_NOT_FOUND"),
])
async def test_topic_routes_invalid_name(http, route, status, text):
    assert_error(await http.post(f"/topic/{route}?topic=bad!name"), status, text)


@pytest.mark.parametrize("route", ["delete", "empty", "pause", "unpause"])
async def test_topic_routes_unknown_topic(http, route):
    assert_error(await http.post(f"/topic/{route}?topic=nosuch"), 404, "TOPIC_NOT_FOUND")
    assert (await stats(http))["topics"] == []


async def test_topic_create_is_idempotent_and_persisted(nsqd, http):
    assert_empty_ok(await http.post("/topic/create?topic=t"))
    assert_empty_ok(await http.post("/topic/create?topic=t"))
    topic = await topic_stats(http, "t")
    assert (topic["channels"], topic["message_count"], topic["paused"]) == ([], 0, False)
    await wait_for_metadata(nsqd, {"t": (False, {})})


async def test_topic_delete_disconnects_consumers_and_forgets_the_topic(nsqd, http):
    client = await consumer(nsqd)
    other = await consumer(nsqd, topic="other")
    await wait_for_metadata(nsqd, {"t": (False, {"c": False}), "other": (False, {"c": False})})
    assert_empty_ok(await http.post("/topic/delete?topic=t"))
    await client.assert_closed()
    assert [topic["topic_name"] for topic in (await stats(http))["topics"]] == ["other"]
    await wait_for_metadata(nsqd, {"other": (False, {"c": False})})
    assert_error(await http.post("/topic/delete?topic=t"), 404, "TOPIC_NOT_FOUND")
    assert (await http.post("/pub?topic=other", content=b"still here")).status_code == 200
    assert await receive(other, 1) == [b"still here"]


async def test_topic_empty_drops_the_topics_backlog(nsqd, http):
    assert (await http.post("/mpub?topic=t", content=b"1\n2\n3")).status_code == 200
    assert (await topic_stats(http, "t"))["depth"] == 3
    assert_empty_ok(await http.post("/topic/empty?topic=t"))
    topic = await topic_stats(http, "t")
    assert (topic["depth"], topic["message_count"]) == (0, 3)
    client = await consumer(nsqd)
    await client.assert_no_frame(0.2)
    assert (await http.post("/pub?topic=t", content=b"after")).status_code == 200
    assert await receive(client, 1) == [b"after"]


async def test_topic_pause_holds_messages_until_unpause(nsqd, http):
    client = await consumer(nsqd)
    await wait_for_metadata(nsqd, {"t": (False, {"c": False})})
    assert_empty_ok(await http.post("/topic/pause?topic=t"))
    assert saved_metadata(nsqd) == {"t": (True, {"c": False})}  # written before the answer
    assert (await http.post("/pub?topic=t", content=b"held")).status_code == 200
    await client.assert_no_frame(0.2)
    topic = await topic_stats(http, "t")
    assert (topic["paused"], topic["depth"], topic["channels"][0]["paused"]) == (True, 1, False)
    assert_empty_ok(await http.post("/topic/pause?topic=t"))  # pausing twice is fine
    assert_empty_ok(await http.post("/topic/unpause?topic=t"))
    assert saved_metadata(nsqd) == {"t": (False, {"c": False})}
    assert await receive(client, 1) == [b"held"]
    assert (await topic_stats(http, "t"))["paused"] is False


async def test_pause_state_survives_concurrent_metadata_writes(nsqd):
    """A pause answered while nsqd.dat is being rewritten for a new channel must end up in nsqd.dat."""
    stream = await trio.open_tcp_stream("127.0.0.1", nsqd.http_port)

    async def post_all(*targets: bytes) -> None:
        """Pipelined POSTs on one connection; each must answer 200."""
        await stream.send_all(b"".join(b"POST %s HTTP/1.1\r\nHost: x\r\n\r\n" % target for target in targets))
        answers = b""
        with trio.fail_after(5):
            while answers.count(b"HTTP/1.1 ") < len(targets):
                answers += await stream.receive_some(65536)
        assert answers.count(b"HTTP/1.1 200 ") == len(targets), answers

    await post_all(b"/topic/create?topic=t", b"/channel/create?topic=t&channel=p")
    expected = {"p": False}
    for index in range(10):
        route = b"pause" if index % 2 == 0 else b"unpause"
        await post_all(b"/channel/create?topic=t&channel=c%d" % index, b"/channel/%s?topic=t&channel=p" % route)
        expected.update({f"c{index}": False, "p": route == b"pause"})
        # deliberate: a stale snapshot (taken before c<index>) written late would land in this pause
        await trio.sleep(0.1)
        await wait_for_metadata(nsqd, {"t": (False, expected)})
    await stream.aclose()


# -- /channel/* ---------------------------------------------------------------------------


CHANNEL_ROUTES = ["create", "delete", "empty", "pause", "unpause"]


@pytest.mark.parametrize("route", CHANNEL_ROUTES)
@pytest.mark.parametrize(("query", "status", "text"), [
    ("", 400, "MISSING_ARG_TOPIC"),
    ("channel=c", 400, "MISSING_ARG_TOPIC"),
    ("topic=bad!name&channel=c", 400, "INVALID_ARG_TOPIC"),
    (f"topic={LONG_NAME}", 400, "INVALID_ARG_TOPIC"),
    ("topic=t", 400, "MISSING_ARG_CHANNEL"),
    ("topic=t&channel=bad/name", 400, "INVALID_ARG_CHANNEL"),
    ("topic=t&channel=", 400, "INVALID_ARG_CHANNEL"),
    ("topic=nosuch&channel=c", 404, "TOPIC_NOT_FOUND"),
    ("topic=t&channel=c%zz", 400, "INVALID_REQUEST"),
])
async def test_channel_routes_errors(http, route, query, status, text):
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert_error(await http.post(f"/channel/{route}?{query}"), status, text)


@pytest.mark.parametrize("route", ["delete", "empty", "pause", "unpause"])
async def test_channel_routes_unknown_channel(http, route):
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert_error(await http.post(f"/channel/{route}?topic=t&channel=nosuch"), 404, "CHANNEL_NOT_FOUND")
    assert_error(await http.get(f"/channel/{route}?topic=t&channel=c"), 405, "METHOD_NOT_ALLOWED")
    assert (await topic_stats(http, "t"))["channels"] == []


async def test_channel_create_needs_the_topic_and_is_persisted(nsqd, http):
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert_empty_ok(await http.post("/channel/create?topic=t&channel=c"))
    assert_empty_ok(await http.post("/channel/create?topic=t&channel=c"))
    channel = await channel_stats(http, "t", "c")
    assert (channel["client_count"], channel["clients"], channel["paused"]) == (0, [], False)
    await wait_for_metadata(nsqd, {"t": (False, {"c": False})})
    assert (await http.post("/pub?topic=t", content=b"kept")).status_code == 200
    assert (await channel_stats(http, "t", "c"))["depth"] == 1


async def test_channel_delete_disconnects_its_consumers_only(nsqd, http):
    client = await consumer(nsqd, channel="c")
    other = await consumer(nsqd, channel="d")
    assert_empty_ok(await http.post("/channel/delete?topic=t&channel=c"))
    await client.assert_closed()
    assert [channel["channel_name"] for channel in (await topic_stats(http, "t"))["channels"]] == ["d"]
    await wait_for_metadata(nsqd, {"t": (False, {"d": False})})
    assert_error(await http.post("/channel/delete?topic=t&channel=c"), 404, "CHANNEL_NOT_FOUND")
    assert (await http.post("/pub?topic=t", content=b"to d")).status_code == 200
    assert await receive(other, 1) == [b"to d"]


async def test_channel_empty_drops_queued_and_in_flight_messages(nsqd, http):
    client = await consumer(nsqd, rdy=1)
    assert (await http.post("/mpub?topic=t", content=b"1\n2\n3")).status_code == 200
    assert (await client.read_message()).body == b"1"
    channel = await channel_stats(http, "t", "c")
    assert (channel["depth"], channel["in_flight_count"]) == (2, 1)
    assert_empty_ok(await http.post("/channel/empty?topic=t&channel=c"))
    channel = await channel_stats(http, "t", "c")
    assert (channel["depth"], channel["in_flight_count"], channel["message_count"]) == (0, 0, 3)
    assert (await http.post("/pub?topic=t", content=b"after")).status_code == 200
    assert await receive(client, 1) == [b"after"]  # nothing of the emptied backlog comes back


async def test_channel_pause_stops_delivery_until_unpause(nsqd, http):
    client = await consumer(nsqd)
    other = await consumer(nsqd, channel="d")
    await wait_for_metadata(nsqd, {"t": (False, {"c": False, "d": False})})
    assert_empty_ok(await http.post("/channel/pause?topic=t&channel=c"))
    assert saved_metadata(nsqd) == {"t": (False, {"c": True, "d": False})}  # written before the answer
    assert (await http.post("/mpub?topic=t", content=b"1\n2")).status_code == 200
    assert await receive(other, 2) == [b"1", b"2"]
    await client.assert_no_frame(0.2)
    channel = await channel_stats(http, "t", "c")
    assert (channel["paused"], channel["depth"]) == (True, 2)
    assert (await topic_stats(http, "t"))["paused"] is False
    assert_empty_ok(await http.post("/channel/unpause?topic=t&channel=c"))
    assert saved_metadata(nsqd) == {"t": (False, {"c": False, "d": False})}
    assert await receive(client, 2) == [b"1", b"2"]
    assert (await channel_stats(http, "t", "c"))["paused"] is False


# -- /config/:opt ------------------------------------------------------------------------


@pytest.fixture
def restore_log_level():
    logger = logging.getLogger("nsqd")
    level = logger.level
    yield
    logger.setLevel(level)


async def test_config_log_level_round_trip(nsqd, http, restore_log_level):
    response = await http.get("/config/log_level")
    assert (response.status_code, response.json()) == (200, 2)  # lg.INFO
    assert response.headers["X-NSQ-Content-Type"] == V1
    assert response.headers["Content-Type"] == JSON
    for body, level, python_level in [(b"debug", 1, logging.DEBUG), (b"WARN", 3, logging.WARNING),
                                      (b"Error", 4, logging.ERROR), (b"fatal", 5, logging.CRITICAL),
                                      (b"info", 2, logging.INFO)]:
        response = await http.put("/config/log_level", content=body)
        assert (response.status_code, response.json()) == (200, level)
        assert (await http.get("/config/log_level")).json() == level
        assert logging.getLogger("nsqd").level == python_level


@pytest.mark.parametrize("body", [b"verbose", b"debug\n", b" info", b"2", b"\xff"])
async def test_config_put_invalid_value(nsqd, http, body):
    assert_error(await http.put("/config/log_level", content=body), 400, "INVALID_VALUE")
    assert (await http.get("/config/log_level")).json() == 2


async def test_config_put_empty_or_too_big_body(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=10)
    async with http_client(nsqd) as http:
        assert_error(await http.put("/config/log_level"), 413, "INVALID_VALUE")
        assert_error(await http.put("/config/nosuch"), 413, "INVALID_VALUE")
        assert_error(await http.put("/config/log_level", content=b"d" * 11), 413, "INVALID_VALUE")
        assert (await http.get("/config/log_level")).json() == 2


@pytest.mark.parametrize("option", ["mem_queue_size", "data_path", "nosuch", "version", "config", "node_id"])
async def test_config_put_other_options_is_invalid_option(http, option):
    assert_error(await http.put(f"/config/{option}", content=b"5"), 400, "INVALID_OPTION")


@pytest.mark.parametrize("option", ["nosuch", "log-level", "LOG_LEVEL", "node_id", "version", "config", "verbose",
                                    "worker_id", "queue_scan_interval"])
async def test_config_get_unknown_option(http, option):
    assert_error(await http.get(f"/config/{option}"), 400, "INVALID_OPTION")


async def test_config_get_any_option_by_its_config_name(start_nsqd):
    nsqd = await start_nsqd(mem_queue_size=77, msg_timeout=2.5, node_id=42)
    async with http_client(nsqd) as http:
        values = {option: (await http.get(f"/config/{option}")).json()
                  for option in ("mem_queue_size", "msg_timeout", "id", "max_msg_size")}
        # a string option is written as is, not as JSON (RespondV1's "case string")
        text = {option: await http.get(f"/config/{option}") for option in ("data_path", "log_prefix")}
    assert values == {"mem_queue_size": 77, "msg_timeout": 2_500_000_000, "id": 42, "max_msg_size": 1024 * 1024}
    assert {option: response.text for option, response in text.items()} == {
        "data_path": nsqd.data_path, "log_prefix": "[nsqd] "}
    assert all(response.headers["X-NSQ-Content-Type"] == V1 for response in text.values())


async def test_config_wrong_method(http):
    assert_error(await http.post("/config/log_level", content=b"debug"), 405, "METHOD_NOT_ALLOWED")
    assert_error(await http.delete("/config/log_level"), 405, "METHOD_NOT_ALLOWED")


# -- routing and conventions --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/nosuch", "/pubx", "/topic", "/topic/", "/topic/nosuch", "/config",
                                  "/config/", "/config/log_level/x", "/stats/x", "/ping/x"])
async def test_unknown_path_is_not_found(http, path):
    for method in ("GET", "POST"):
        assert_error(await http.request(method, path), 404, "NOT_FOUND")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/ping"), ("GET", "/pub"), ("PUT", "/pub"), ("GET", "/mpub"), ("POST", "/stats"),
    ("POST", "/info"), ("DELETE", "/topic/delete"), ("GET", "/channel/create"), ("PATCH", "/config/log_level"),
])
async def test_wrong_method_is_method_not_allowed(http, method, path):
    assert_error(await http.request(method, path + "?topic=t"), 405, "METHOD_NOT_ALLOWED")


async def test_every_v1_answer_carries_the_nsq_content_type(http):
    responses = [
        await http.get("/info"),
        await http.post("/pub?topic=t", content=b"x"),
        await http.post("/mpub?topic=t", content=b"x"),
        await http.get("/stats"),
        await http.get("/stats?format=json"),
        await http.post("/topic/create?topic=t"),
        await http.post("/channel/create?topic=t&channel=c"),
        await http.post("/channel/pause?topic=t&channel=c"),
        await http.get("/config/log_level"),
        await http.post("/pub?topic=t"),
        await http.get("/nosuch"),
    ]
    assert [response.headers.get("X-NSQ-Content-Type") for response in responses] == [V1] * len(responses)
    json_answers = [response for response in responses if response.content.startswith((b"{", b"2"))]
    assert len(json_answers) == 5
    assert all(response.headers["Content-Type"] == JSON for response in json_answers)


async def test_status_lines_carry_go_reason_phrases(nsqd):
    for request, status_line in [
        (b"GET /ping HTTP/1.1\r\n", b"HTTP/1.1 200 OK\r\n"),
        (b"GET /nosuch HTTP/1.1\r\n", b"HTTP/1.1 404 Not Found\r\n"),
        (b"PUT /ping HTTP/1.1\r\n", b"HTTP/1.1 405 Method Not Allowed\r\n"),
        (b"POST /pub?topic=t HTTP/1.1\r\n", b"HTTP/1.1 400 Bad Request\r\n"),
        (b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 100000000\r\n", b"HTTP/1.1 413 Request Entity Too Large\r\n"),
    ]:
        answer = await raw_request(nsqd.http_port, request + b"Host: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(status_line), answer


async def test_head_gets_headers_without_a_body_and_keeps_the_connection(nsqd):
    stream = await trio.open_tcp_stream("127.0.0.1", nsqd.http_port)
    conn = h11.Connection(h11.CLIENT)

    async def exchange(method: bytes, target: bytes) -> tuple[h11.Response, bytes]:
        await stream.send_all(conn.send(h11.Request(method=method, target=target, headers=[("Host", "x")]))
                              + conn.send(h11.EndOfMessage()))
        response, body = None, b""
        with trio.fail_after(5):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    response = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    conn.start_next_cycle()
                    return response, body

    response, body = await exchange(b"HEAD", b"/ping")
    assert (response.status_code, body) == (405, b"")
    assert (b"x-nsq-content-type", V1.encode()) in response.headers
    response, body = await exchange(b"GET", b"/ping")
    assert (response.status_code, body) == (200, b"OK")
    await stream.aclose()


# -- robustness -------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02\xff\xfe\r\n\r\n",
    bytes(range(256)) * 64,
    b"GET /ping HTTP/9.9\r\n\r\n",
    b"GET /ping\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 100_000 + b"\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\nx",
    b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
    b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",  # then the client leaves
    b"GET /ping HTTP/1.1\r\nHost: x\r\n",  # headers never finished
])
async def test_malformed_http_never_breaks_the_server(nsqd, garbage):
    with trio.move_on_after(0.5):  # a half-sent request: nsqd waits for the rest until we leave
        answer = await raw_request(nsqd.http_port, garbage)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    await assert_http_healthy(nsqd)
    assert "t" not in nsqd.topics


async def test_client_leaving_mid_body_publishes_nothing(nsqd):
    client = await consumer(nsqd)
    stream = await trio.open_tcp_stream("127.0.0.1", nsqd.http_port)
    await stream.send_all(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf")
    await stream.aclose()  # (the half body reaches nsqd before the close, in order)
    await client.assert_no_frame(0.1)
    await assert_http_healthy(nsqd)


async def test_keep_alive_connection_serves_many_requests(nsqd, http):
    client = await consumer(nsqd, rdy=200)
    for index in range(150):
        response = await http.post("/pub?topic=t", content=b"%d" % index)
        assert response.status_code == 200
        if index % 10 == 0:
            assert_error(await http.post("/pub?topic=bad!name", content=b"x"), 400, "INVALID_TOPIC")
            assert (await http.get("/ping")).text == "OK"
    assert await receive(client, 150) == [b"%d" % index for index in range(150)]
    assert (await topic_stats(http, "t"))["message_count"] == 150


async def test_pipelined_requests_are_answered_in_order(nsqd):
    requests = b"".join(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n%02d" % index
                        for index in range(50))
    answer = await raw_request(nsqd.http_port, requests + b"GET /stats?format=json HTTP/1.1\r\nHost: x\r\n"
                                                          b"Connection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 ") == 51
    assert json.loads(answer.rsplit(b"\r\n\r\n", 1)[1])["topics"][0]["message_count"] == 50
    client = await consumer(nsqd, rdy=50)
    assert await receive(client, 50) == [b"%02d" % index for index in range(50)]


async def test_expect_100_continue_is_answered_before_the_body(nsqd):
    client = await consumer(nsqd)
    stream = await trio.open_tcp_stream("127.0.0.1", nsqd.http_port)
    await stream.send_all(b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                          b"Expect: 100-continue\r\n\r\n")
    with trio.fail_after(0.5):  # curl waits 1 s for it, then sends the body anyway
        assert await stream.receive_some(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
    await stream.send_all(b"hello")
    with trio.fail_after(5):
        answer = await stream.receive_some(65536)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nOK")
    await stream.aclose()
    assert await receive(client, 1) == [b"hello"]


async def test_expect_100_continue_with_a_body_too_big_gets_413_at_once(nsqd):
    answer = await raw_request(nsqd.http_port, b"POST /mpub?topic=t HTTP/1.1\r\nHost: x\r\n"
                                               b"Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert answer.endswith(b'{"message":"BODY_TOO_BIG"}')
    await assert_http_healthy(nsqd)
