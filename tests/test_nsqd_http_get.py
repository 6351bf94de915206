"""nsqd's HTTP GETs to nsqlookupd (nsqd/http_get.py), against a scripted server on a loopback port.

The client keeps a connection between requests as Go's transport does, replaces one the server
closed, and words a request that got no answer as Go's http.Client does. Go's nsqd beside ours,
on the same failures, is in test_go_topic_creation.py.
"""

import pytest
import trio

from nsqd.http_get import ACCEPT_V1, Answer, HTTPGetError, HTTPGetter

from .admin_helpers import closed_port_address

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"channels\":[]}"


class ScriptedServer:
    """Answers the n-th request of all with ``script[n]`` (bytes to send, then whether to close)."""

    def __init__(self, script: list[tuple[bytes, bool]]):
        self.script = script
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await nursery.start(trio.serve_listeners, self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        async with stream:
            while data := await stream.receive_some(65536):
                self.requests.append(data)
                answer, close = self.script[len(self.requests) - 1]
                await stream.send_all(answer)
                if close:
                    return


async def started(nursery, script) -> ScriptedServer:
    server = ScriptedServer(script)
    await server.start(nursery)
    return server


async def test_requests_share_one_kept_connection(nursery):
    server = await started(nursery, [(OK, False)] * 3)
    client = HTTPGetter(2.0, 5.0)
    for topic in ("a", "b", "c"):
        assert await client.get("127.0.0.1", server.port, f"/channels?topic={topic}") == Answer(
            200, "OK", b'{"channels":[]}')
    await client.aclose()
    assert server.connections == 1
    assert server.requests[1] == (f"GET /channels?topic=b HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                                  f"Accept: {ACCEPT_V1}\r\n\r\n").encode()


async def test_a_kept_connection_the_server_closed_is_replaced(nursery):
    """The server closes after its answer without saying so: the next request finds the kept
    connection closed before any answer and is sent again on a new one."""
    server = await started(nursery, [(OK, True), (OK, True)])
    client = HTTPGetter(2.0, 5.0)
    assert (await client.get("127.0.0.1", server.port, "/x")).status == 200
    assert (await client.get("127.0.0.1", server.port, "/y")).status == 200
    await client.aclose()
    assert server.connections == 2


async def test_an_answer_saying_connection_close_is_not_kept(nursery):
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    server = await started(nursery, [(closing, False), (OK, False)])
    client = HTTPGetter(2.0, 5.0)
    assert (await client.get("127.0.0.1", server.port, "/x")).body == b"{}"
    assert (await client.get("127.0.0.1", server.port, "/y")).status == 200
    await client.aclose()
    assert server.connections == 2


async def test_a_chunked_error_answer_is_read_whole(nursery):
    chunked = (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n{\"mes\r\n12\r\nsage\":\"NOT_FOUND\"}\r\n0\r\n\r\n")
    server = await started(nursery, [(chunked, False), (OK, False)])
    client = HTTPGetter(2.0, 5.0)
    assert await client.get("127.0.0.1", server.port, "/x") == Answer(404, "Not Found", b'{"message":"NOT_FOUND"}')
    assert (await client.get("127.0.0.1", server.port, "/y")).status == 200
    await client.aclose()
    assert server.connections == 1


@pytest.mark.parametrize(("script", "error"), [
    ([(b"", True)], "EOF"),
    ([(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"chan", True)], "unexpected EOF"),
    ([(b"not http at all\r\n\r\n", False)], "malformed HTTP response: "),
])
async def test_an_answer_cut_short_or_malformed_is_an_error(nursery, script, error):
    server = await started(nursery, script)
    client = HTTPGetter(2.0, 5.0)
    with pytest.raises(HTTPGetError) as failed:
        await client.get("127.0.0.1", server.port, "/x")
    assert str(failed.value).startswith(f'Get "http://127.0.0.1:{server.port}/x": {error}')


async def test_a_refused_connect_is_worded_as_gos_dial_error():
    port = int(closed_port_address().rsplit(":", 1)[1])
    with pytest.raises(HTTPGetError) as failed:
        await HTTPGetter(2.0, 5.0).get("127.0.0.1", port, "/x")
    assert str(failed.value) == f'Get "http://127.0.0.1:{port}/x": dial tcp 127.0.0.1:{port}: connect: connection refused'


async def test_a_server_that_never_answers_times_out_the_request(nursery):
    """--http-client-request-timeout bounds the whole request (here 0.2 s: the server never answers)."""
    never = trio.Event()

    async def silent(stream):
        async with stream:
            await never.wait()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await nursery.start(trio.serve_listeners, silent, listeners)
    with pytest.raises(HTTPGetError) as failed:
        await HTTPGetter(2.0, 0.2).get("127.0.0.1", port, "/x")
    assert str(failed.value) == (f'Get "http://127.0.0.1:{port}/x": context deadline exceeded '
                                 "(Client.Timeout exceeded while awaiting headers)")
    never.set()
