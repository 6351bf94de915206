"""serving/http.py's answers whose body is a list of chunks (nsqd's /stats, /metrics: nsqd/chunks.py):
the same bytes as the joined body, Content-Length their sum, through a reader slower than the socket."""

import pytest
import trio

from serving.http import WRITE_BYTES, WRITEV_PARTS, Response, _head, _send


def chunks() -> list[bytes]:
    """More buffers than one writev takes and more bytes than a socket buffer holds, some empty."""
    return [bytes([number % 251]) * (number * 37 % 9000) for number in range(3 * WRITEV_PARTS)]


def test_content_length_is_the_chunks_sum(monkeypatch):
    # one Date for both heads: joining the chunks on a loaded machine can cross a second
    monkeypatch.setattr("serving.http._date", lambda: b"Sun, 29 Nov 2026 15:04:05 GMT")
    body = chunks()
    assert _head(Response(200, body), True) == _head(Response(200, b"".join(body)), True)


@pytest.mark.parametrize("whole", [False, True], ids=["chunks", "bytes"])
async def test_an_answer_arrives_whole_and_in_order_through_a_slow_reader(whole):
    """Chunks, or one bytes body several times WRITE_BYTES."""
    body = b"".join(chunks()) if whole else chunks()
    assert len(body if whole else b"".join(body)) > 3 * WRITE_BYTES
    head = _head(Response(200, body), False)
    left, right = trio.socket.socketpair()
    sender, reader = trio.SocketStream(left), trio.SocketStream(right)
    received = bytearray()
    others_ran = 0

    async def read_slowly() -> None:
        while data := await reader.receive_some(16384):
            received.extend(data)
            await trio.sleep(0.0005)

    async def other() -> None:
        nonlocal others_ran
        while True:
            others_ran += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_slowly)
        nursery.start_soon(other)
        await _send(sender, head, body)
        await sender.aclose()
        while len(received) < len(head) + len(b"".join(body) if not whole else body):
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert bytes(received) == head + (body if whole else b"".join(body))
    assert others_ran > 10  # the loop served others while the sender waited for room
