"""The portable I/O backend: a connection over any trio stream, read by its own task.

It runs wherever trio does. Every connection that upgrades (TLS, then at most one codec) is
served by it, the layers stacked as trio streams: ``trio.SSLStream`` and then
:class:`CompressedStream` over the socket. Where ``select.epoll`` does not exist, or with
``--io-backend=portable``, plain connections are served by it too; so are the tests'
in-memory streams. It is also the base of the Linux fast path (nsqd/epoll_backend.py), which
reads and writes plain sockets its own way and inherits the rest. See nsqd/io_backend.py.
"""

import trio

from .io_backend import ENDED, RECEIVE_SIZE


class CompressedStream(trio.abc.Stream):
    """A codec (common/compression.py) over a stream: sends are encoded, receives decoded."""

    def __init__(self, transport_stream, codec, received: bytes = b""):
        self.transport_stream = transport_stream
        self.codec = codec
        self._received = received  # read before the switch, so still to decode

    async def send_all(self, data) -> None:
        await self.transport_stream.send_all(self.codec.encode(data))

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:
        codec = self.codec
        while not codec.ended:
            if self._received:
                data, self._received = self._received, b""
            elif not codec.backlog:
                data = await self.transport_stream.receive_some(RECEIVE_SIZE)
                if not data:
                    break
            else:
                data = b""
            decoded = codec.decode(data)
            if decoded:
                return decoded
        return b""

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


class TurnTakingStream(trio.abc.Stream):
    """A TLS connection's socket, whose reads take a turn (nsqd/turns.py) before TLS decrypts
    them: 200 TLS clients that closed together woke their 200 reader tasks in one round of the
    loop, each unwrapping its end (~50 us) and starting its connection's close, whose next steps
    came in the rounds after, a hundred or more a round (3-10 ms each, in the loop trace)."""

    def __init__(self, transport_stream: trio.abc.Stream, turns):
        self.transport_stream = transport_stream
        self._turns = turns

    async def send_all(self, data) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:
        try:
            data = await self.transport_stream.receive_some(max_bytes)
        except trio.BrokenResourceError:  # a reset: its close is work for a turn too
            await self._turns.take()
            raise
        await self._turns.take()
        return data

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


class StreamBackend:
    """The connection's stream, read by the connection's own task (nsqd/io_backend.py)."""

    direct = False  # a trio stream is written by awaiting it

    def __init__(self, stream: trio.abc.Stream):
        self.stream = stream
        # ``send(data)`` is the stream's own send_all: no frame of ours in each await of a send
        self.send = stream.send_all

    async def receive(self, connection):
        stream = self.stream
        while True:
            data = await stream.receive_some(RECEIVE_SIZE)
            if not data:
                return ENDED
            if type(data) is not bytes:  # a trio stream may give a bytearray (the tests' memory streams)
                data = bytes(data)
            result = connection.received(data, trio.current_time())
            if result is not None:
                return result.unwrap()

    def send_now(self, data: bytearray) -> int:
        raise BlockingIOError("a trio stream is written by awaiting it")

    async def aclose(self) -> None:
        await self.stream.aclose()

    def now(self) -> float:
        return trio.current_time()

    async def start_tls(self, context, turns) -> "StreamBackend":
        stream = trio.SSLStream(TurnTakingStream(self.stream, turns), context, server_side=True)
        await stream.do_handshake()
        return StreamBackend(stream)

    def compress(self, codec, received: bytes) -> "StreamBackend":
        return StreamBackend(CompressedStream(self.stream, codec, received))
