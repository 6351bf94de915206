"""nsqd's and nsqlookupd's HTTP servers against hostile requests, over real sockets.

Oversized bodies get NSQ's 413 codes before they are read; request lines and headers past
Go's limit get Go's 431; bad query strings, bad encodings, bad framing and random requests
get NSQ's error codes or Go-style 400s, never a 500; slow clients (slow-loris) on every
route neither block anyone else nor hold their connection past the header and read
timeouts. After each case the daemon still answers a normal request.
"""

import contextlib
import socket
import string

import httpx
import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from serving import http as serving_http

from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess, clock, start_lookupd  # noqa: F401

MAX_MSG_SIZE = 1024
MAX_BODY_SIZE = 4096
NSQD_ROUTES = [("GET", "/ping"), ("GET", "/info"), ("POST", "/pub"), ("POST", "/mpub"), ("GET", "/stats"),
               ("GET", "/metrics"), ("POST", "/topic/create"), ("POST", "/topic/delete"), ("POST", "/topic/empty"),
               ("POST", "/topic/pause"), ("POST", "/topic/unpause"), ("POST", "/channel/create"),
               ("POST", "/channel/delete"), ("POST", "/channel/empty"), ("POST", "/channel/pause"),
               ("POST", "/channel/unpause"), ("GET", "/config/log_level"), ("PUT", "/config/log_level")]
LOOKUPD_ROUTES = [("GET", "/ping"), ("GET", "/info"), ("GET", "/debug"), ("GET", "/lookup"), ("GET", "/topics"),
                  ("GET", "/channels"), ("GET", "/nodes"), ("POST", "/topic/create"), ("POST", "/topic/delete"),
                  ("POST", "/channel/create"), ("POST", "/channel/delete"), ("POST", "/topic/tombstone")]
ROUTES = {"nsqd": NSQD_ROUTES, "nsqlookupd": LOOKUPD_ROUTES}


@pytest.fixture(params=["nsqd", "nsqlookupd"])
async def daemon(request, start_nsqd, start_lookupd):  # noqa: F811
    """(name, HTTP port) of an in-process daemon."""
    if request.param == "nsqd":
        nsqd = await start_nsqd(max_msg_size=MAX_MSG_SIZE, max_body_size=MAX_BODY_SIZE)
        return "nsqd", nsqd.http_port
    lookupd = await start_lookupd()
    return "nsqlookupd", lookupd.http_port


@pytest.fixture
async def nsqd_http(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=MAX_MSG_SIZE, max_body_size=MAX_BODY_SIZE)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as client:
        yield client


class Answer:
    """An HTTP answer read off a raw socket: status, headers (lower-case names), body."""

    def __init__(self, raw: bytes):
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1]) if lines[0].startswith("HTTP/1.1 ") else 0
        self.headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.headers} {self.body[:80]!r}>"


async def exchange(port: int, data: bytes, timeout: float = 3.0) -> Answer:
    """Send raw bytes, read until the server closes or one whole answer (by Content-Length) is in."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    raw = b""
    try:
        with trio.move_on_after(timeout):
            try:
                await stream.send_all(data)
            except trio.BrokenResourceError:
                pass  # the server answered and closed while this was still sending
            while not complete(raw):
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    chunk = b""
                if not chunk:
                    break
                raw += chunk
    finally:
        await stream.aclose()
    return Answer(raw)


def complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def request(method: str, target: str, body: bytes = b"", headers: dict | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body and "Transfer-Encoding" not in (headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def assert_nsq_error(answer: Answer, status: int, text: str) -> None:
    assert (answer.status, answer.body) == (status, b'{"message":"%s"}' % text.encode()), answer
    assert answer.headers["x-nsq-content-type"] == "nsq; version=1.0"


def assert_go_refusal(answer: Answer, status: int) -> None:
    """net/http's own answer to a request it will not read: plain text, connection closed."""
    assert answer.status == status, answer
    assert answer.body.startswith(b"%d " % status) and answer.headers["connection"] == "close", answer
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"


async def assert_serves(port: int) -> None:
    answer = await exchange(port, request("GET", "/ping", headers={"Connection": "close"}))
    assert (answer.status, answer.body) == (200, b"OK"), answer


# -- oversized bodies and headers ---------------------------------------------------------------


@pytest.mark.parametrize(("target", "size", "text"), [
    ("/pub?topic=t", MAX_MSG_SIZE + 1, "MSG_TOO_BIG"),
    ("/pub?topic=t&defer=10", 50 * MAX_BODY_SIZE, "MSG_TOO_BIG"),
    ("/mpub?topic=t", MAX_BODY_SIZE + 1, "BODY_TOO_BIG"),
    ("/mpub?topic=t&binary=true", 50 * MAX_BODY_SIZE, "BODY_TOO_BIG"),
])
async def test_oversized_bodies_get_nsqs_413(nsqd_http, target, size, text):
    async def chunks():
        for _ in range(size // 512 + 1):
            yield b"x" * 512

    response = await nsqd_http.post(target, content=b"x" * size)
    assert (response.status_code, response.json()) == (413, {"message": text})
    chunked = await nsqd_http.post(target, content=chunks())
    assert (chunked.status_code, chunked.json()) == (413, {"message": text})


async def test_a_body_declared_too_big_is_refused_before_it_is_sent(start_nsqd):
    """As nsqd checks Content-Length first: no 100 Continue, no waiting for the body."""
    nsqd = await start_nsqd(max_msg_size=MAX_MSG_SIZE, max_body_size=MAX_BODY_SIZE)
    for target, declared, text in [("/pub?topic=t", MAX_MSG_SIZE + 1, "MSG_TOO_BIG"),
                                   ("/mpub?topic=t", MAX_BODY_SIZE + 1, "BODY_TOO_BIG")]:
        head = request("POST", target, headers={"Content-Length": declared, "Expect": "100-continue"})
        with trio.fail_after(1):
            answer = await exchange(nsqd.http_port, head)
        assert_nsq_error(answer, 413, text)
        assert answer.headers["connection"] == "close"
    config = request("PUT", "/config/log_level", b"d" * (MAX_MSG_SIZE + 1))
    assert_nsq_error(await exchange(nsqd.http_port, config), 413, "INVALID_VALUE")
    await assert_serves(nsqd.http_port)


async def test_an_oversized_body_on_a_route_that_takes_none_is_not_read(daemon):
    _, port = daemon
    answer = await exchange(port, request("POST", "/topic/create?topic=t", headers={"Content-Length": 50 * 2**20}))
    assert answer.status == 200 and answer.headers["connection"] == "close", answer
    await assert_serves(port)


@pytest.mark.parametrize("where", ["header", "headers", "url"])
async def test_request_head_over_gos_limit_gets_431(daemon, where):
    _, port = daemon
    big = 2 * serving_http.MAX_HEADER_BYTES
    data = {
        "header": request("GET", "/ping", headers={"X-Big": "a" * big}),
        "headers": request("GET", "/ping", headers={f"X-{n}": "a" * 1000 for n in range(big // 1000)}),
        "url": request("GET", "/ping?x=" + "a" * big),
    }[where]
    assert_go_refusal(await exchange(port, data), 431)
    await assert_serves(port)


async def test_request_head_just_under_the_limit_is_served(daemon):
    _, port = daemon
    headers = {"X-Big": "a" * (serving_http.MAX_HEADER_BYTES - 1000), "Connection": "close"}
    answer = await exchange(port, request("GET", "/ping", headers=headers))
    assert (answer.status, answer.body) == (200, b"OK")


# -- framing, encodings, query strings ------------------------------------------------------------


@pytest.mark.parametrize("data", [
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: abc\r\n\r\nx",
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: -1\r\n\r\nx",
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\nx",
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
    b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nx\r\n0\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    b"\x00\x01\x02\xff\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /ping\r\n\r\n",
    b"GET /ping HTTP/3.0\r\n\r\n",
    b"G@T /ping HTTP/1.1\r\n\r\n",
    b"GET /pi\x00ng HTTP/1.1\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\n\r\n",
    b"GET /stats?topic=\xff HTTP/1.1\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nBad Header\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n: empty-name\r\n\r\n",
])
async def test_malformed_requests_get_a_400_and_the_connection_closes(daemon, data):
    _, port = daemon
    assert_go_refusal(await exchange(port, data), 400)
    await assert_serves(port)


NSQD_QUERIES = [
    ("POST", "/pub?topic=%zz", "x", 400, "INVALID_REQUEST"),
    ("POST", "/pub?topic=t&defer=%", "x", 400, "INVALID_REQUEST"),
    ("POST", "/pub?topic=t;x", "x", 400, "INVALID_REQUEST"),
    ("POST", "/pub?topic=%ff%fe", "x", 400, "INVALID_TOPIC"),
    ("POST", "/pub?topic=%00", "x", 400, "INVALID_TOPIC"),
    ("POST", "/pub?topic=t&defer=%ff", "x", 400, "INVALID_DEFER"),
    ("POST", "/pub?=t", "x", 400, "MISSING_ARG_TOPIC"),
    ("POST", "/mpub?topic=t&binary=%c3%28", "\x00\x00\x00\x01", 413, "BAD_MESSAGE"),
    ("GET", "/stats?format=json&topic=%zz", "", 400, "INVALID_REQUEST"),
    ("POST", "/topic/create?topic=%e2%82", "", 400, "INVALID_TOPIC"),
    ("POST", "/topic/delete?topic=%ff", "", 404, "TOPIC_NOT_FOUND"),
    ("POST", "/channel/create?topic=t&channel=%ff", "", 400, "INVALID_ARG_CHANNEL"),
    ("POST", "/channel/pause?topic=%ff&channel=c", "", 400, "INVALID_ARG_TOPIC"),
    ("GET", "/config/%ff", "", 400, "INVALID_OPTION"),
    ("PUT", "/config/log_level", "\udcff\udcfe", 400, "INVALID_VALUE"),
    ("PUT", "/config/nsqlookupd_tcp_addresses", "\udcff\udcfe", 400, "INVALID_VALUE"),
    ("PUT", "/config/nsqlookupd_tcp_addresses", "[" * 1000, 400, "INVALID_VALUE"),
]
LOOKUPD_QUERIES = [
    ("GET", "/lookup?topic=%zz", "", 400, "INVALID_REQUEST"),
    ("GET", "/lookup?topic=t;x", "", 400, "INVALID_REQUEST"),
    ("GET", "/lookup?topic=%ff", "", 404, "TOPIC_NOT_FOUND"),
    ("GET", "/channels?topic=%", "", 400, "INVALID_REQUEST"),
    ("POST", "/topic/create?topic=%ff%fe", "", 400, "INVALID_ARG_TOPIC"),
    ("POST", "/channel/create?topic=t&channel=%e2%82", "", 400, "INVALID_ARG_CHANNEL"),
    ("POST", "/channel/delete?topic=%00&channel=c", "", 400, "INVALID_ARG_TOPIC"),
    ("POST", "/topic/tombstone?topic=t", "", 400, "MISSING_ARG_NODE"),
    ("GET", "/%ff", "", 404, "NOT_FOUND"),
]
QUERY_CASES = [("nsqd", *case) for case in NSQD_QUERIES] + [("nsqlookupd", *case) for case in LOOKUPD_QUERIES]


@pytest.mark.parametrize(("daemon", "method", "target", "body", "status", "text"), QUERY_CASES, indirect=["daemon"])
async def test_bad_query_strings_and_encodings_get_nsqs_codes(daemon, method, target, body, status, text):
    _, port = daemon
    data = request(method, target, body.encode("utf-8", "surrogateescape"), {"Connection": "close"})
    assert_nsq_error(await exchange(port, data), status, text)


# -- random requests -------------------------------------------------------------------------------

query_chars = string.ascii_letters + string.digits + "%&=;+#?/.-_ \x7f"
random_requests = st.tuples(
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]),
    st.sampled_from([path for routes in ROUTES.values() for _, path in routes] + ["/", "/config/", "/x%00"]),
    st.text(alphabet=query_chars, max_size=60),
    st.dictionaries(st.sampled_from(["Content-Type", "Accept", "Expect", "X-Forwarded-For", "Connection", "Cookie"]),
                    st.text(alphabet=string.printable.strip() + " \x80\xff", max_size=30), max_size=3),
    st.binary(max_size=300),
)


@pytest.fixture(scope="module")
def daemon_processes(tmp_path_factory):
    """Real nsqd and nsqlookupd processes: name -> HTTP port."""
    nsqd = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", f"--max-msg-size={MAX_MSG_SIZE}",
                       f"--max-body-size={MAX_BODY_SIZE}")
    lookupd = LookupdProcess()
    yield {"nsqd": nsqd.http_port, "nsqlookupd": lookupd.http_port}
    for process in (nsqd, lookupd):
        assert process.stop() == 0
        assert "Traceback" not in process.log()


def blocking_exchange(port: int, data: bytes) -> Answer:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
        raw = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                raw += chunk
    return Answer(raw)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["nsqd", "nsqlookupd"]), random_requests)
def test_random_requests_never_get_a_500(daemon_processes, name, parts):
    method, path, query, headers, body = parts
    assume(not (method == "PUT" and path.startswith("/config/")))  # could turn nsqd's log level down
    target = path + ("?" + query.replace(" ", "+").replace("#", "%23") if query else "")
    answer = blocking_exchange(daemon_processes[name], request(method, target, body, headers | {"Connection": "close"}))
    assert 200 <= answer.status < 500, answer
    if answer.status >= 400 and method != "HEAD":
        assert answer.body.startswith((b'{"message":', b"400 Bad Request")), answer


# -- slow clients ------------------------------------------------------------------------------------


async def trickle(port: int, data: bytes, pause: float, done: trio.Event) -> str:
    """Send one byte at a time; how it ended: "answered", "closed" by the server, or "cut off"."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        for index in range(len(data)):
            if done.is_set():
                return "cut off"
            try:
                await stream.send_all(data[index:index + 1])
            except trio.BrokenResourceError:
                return "closed"
            with trio.move_on_after(pause):
                try:
                    received = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return "closed"
                return "answered" if received else "closed"
        return "sent"
    finally:
        await stream.aclose()


def slow_requests(name: str) -> list[bytes]:
    """Every route of the daemon, with a query and a body, to trickle."""
    return [request(method, f"{path}?topic=t&channel=c", b"body" if method in ("POST", "PUT") else b"",
                    {"User-Agent": "slow-loris", "X-Padding": "p" * 50}) for method, path in ROUTES[name]]


async def test_slow_clients_on_every_route_block_nobody(daemon):
    """Trickled requests on every route, several each, while a normal client is served at once."""
    name, port = daemon
    done = trio.Event()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        async with trio.open_nursery() as nursery:
            for data in slow_requests(name) * 5:
                nursery.start_soon(trickle, port, data, 0.05, done)
            await trio.sleep(0.3)  # deliberate: the trickles under way (a few bytes each)
            for _ in range(3):
                for method, path in ROUTES[name]:
                    # at once: far below the 10 s a trickle could hold a blocking server, even under load
                    with trio.fail_after(3):
                        response = await http.request(method, path, params={"topic": "t", "channel": "c"})
                    assert response.status_code != 500
                await trio.sleep(0.1)  # deliberate: the rounds spread over the trickles' lives
            done.set()


@pytest.fixture
def short_timeouts(monkeypatch):
    """Header and read timeouts short enough to watch them close connections."""
    monkeypatch.setattr(serving_http, "HEADER_TIMEOUT", 0.5)
    monkeypatch.setattr(serving_http, "READ_TIMEOUT", 1.0)


async def closed_after(port: int, data: bytes, pause: float) -> float:
    """Trickle ``data`` (a byte every ``pause`` s); the seconds until the server closes."""
    start = trio.current_time()
    with trio.fail_after(5):
        outcome = await trickle(port, data, pause, trio.Event())
    assert outcome == "closed"
    return trio.current_time() - start


async def test_slow_headers_are_closed_after_the_header_timeout(daemon, short_timeouts):
    name, port = daemon
    async with trio.open_nursery() as nursery:
        for data in slow_requests(name):
            async def check(data=data):
                assert 0.4 <= await closed_after(port, data, 0.05) <= 1.5
            nursery.start_soon(check)
    await assert_serves(port)


async def test_slow_bodies_are_closed_after_the_read_timeout(daemon, short_timeouts):
    name, port = daemon

    async def check(method: str, path: str) -> None:
        head = request(method, f"{path}?topic=t&channel=c", headers={"Content-Length": 1000})
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        start = trio.current_time()
        await stream.send_all(head)
        assert 0.8 <= await closed_after_body_trickle(stream) - start <= 2.0

    async with trio.open_nursery() as nursery:
        for method, path in ROUTES[name]:
            if method in ("POST", "PUT"):
                nursery.start_soon(check, method, path)
    await assert_serves(port)


async def closed_after_body_trickle(stream) -> float:
    """Send the body a byte at a time; when the server closes."""
    with trio.fail_after(5):
        try:
            while True:
                await stream.send_all(b"x")
                with trio.move_on_after(0.05):
                    if not await stream.receive_some(65536):
                        return trio.current_time()
        except trio.BrokenResourceError:
            return trio.current_time()
        finally:
            await stream.aclose()


async def test_silent_connections_close_but_idle_kept_alive_ones_wait(daemon, short_timeouts):
    _, port = daemon
    silent = await trio.open_tcp_stream("127.0.0.1", port)
    kept = await trio.open_tcp_stream("127.0.0.1", port)
    await kept.send_all(request("GET", "/ping"))
    assert (await kept.receive_some(65536)).endswith(b"\r\n\r\nOK")
    with trio.fail_after(2):
        assert await silent.receive_some(65536) == b""  # closed unanswered after the header timeout
    # deliberate: past the header timeout, but a kept-alive connection waits for the idle timeout (120 s)
    await trio.sleep(0.5)
    await kept.send_all(request("GET", "/ping"))
    assert (await kept.receive_some(65536)).endswith(b"\r\n\r\nOK")
    await kept.aclose()
    await silent.aclose()
