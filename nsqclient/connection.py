"""One connection to one nsqd over anyio streams (go-nsq conn.go), on common/'s sans-IO V2 codec.

Theory of operation:

* ``connect()`` dials (``dial_timeout``), sends the magic and IDENTIFY with the fields go-nsq
  sends, and reads the answer in the clear. Then, as nsqd granted: the TLS handshake, then
  the snappy or deflate codec (bytes that came in behind the answer already belong to the
  codec), each confirmed by an ``OK`` read through the new layer; then AUTH when nsqd
  requires it. ``subscribe()`` sends SUB and waits for its ``OK``.
* ``run()`` runs two loops until the connection ends. The reader takes every whole frame a
  receive brought, answers heartbeats with NOP, and hands messages to the delegate in
  batches (a response or error frame first flushes the batch before it, so the delegate sees
  frames in wire order). The writer sends everything queued since its last write in one
  send: the FINs for a batch of messages, or many pipelined PUBs, leave together.
* ``send()`` never waits; it queues bytes and wakes the writer. Bytes queued once the
  connection is closed are dropped (nsqd requeues whatever was in flight on it).
* ``close_when_flushed()`` writes what is queued, then closes; ``close()`` closes at once.

The delegate (Producer or Consumer) is told ``on_messages(conn, messages)``,
``on_response(conn, data)``, ``on_error(conn, error)``, ``on_requeued(conn, backoff)``,
``on_finished(conn)`` (only while ``answers_watched`` is set: FIN is the hot path) and, once,
``on_close(conn, error)``.
"""

import json
import logging

import anyio
from anyio.streams.tls import TLSStream

from common.client_v2 import FrameParser, split_error
from common.commands import MAGIC_V2, Auth, Identify, Sub
from common.compression import DeflateCodec, SnappyCodec
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT, FrameError
from common.message import HEADER_LENGTH

from .config import Config
from .errors import AuthError, ConnectError, ConnectionClosedError, NSQError, ProtocolError
from .message import Message
from .tls import client_context

log = logging.getLogger("nsqclient")

RECEIVE_SIZE = 256 * 1024
NOP = b"NOP\n"
FIN = b"FIN "
NEWLINE = b"\n"
DEFAULT_MAX_RDY_COUNT = 2500  # go-nsq's until IDENTIFY says otherwise


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def identify_body(config: Config) -> dict:
    """IDENTIFY's JSON as go-nsq sends it (conn.go identify); durations in ms, -1 disables."""
    return {
        "client_id": config.client_id,
        "hostname": config.hostname,
        "user_agent": config.user_agent,
        "short_id": config.client_id,
        "long_id": config.hostname,
        "tls_v1": config.tls_v1,
        "deflate": config.deflate,
        "deflate_level": config.deflate_level,
        "snappy": config.snappy,
        "feature_negotiation": True,
        "heartbeat_interval": _milliseconds_or_disabled(config.heartbeat_interval),
        "sample_rate": config.sample_rate,
        "output_buffer_size": config.output_buffer_size,
        "output_buffer_timeout": _milliseconds_or_disabled(config.output_buffer_timeout),
        "msg_timeout": round(config.msg_timeout * 1000),
    }


def _milliseconds_or_disabled(seconds: float) -> int:
    return -1 if seconds < 0 else round(seconds * 1000)


class Connection:
    def __init__(self, address: str, config: Config, delegate):
        self.address = address
        self.config = config
        self._delegate = delegate
        self._stream = None
        self._parser = FrameParser()
        self._encode = None
        self._codec = None
        self._out: list[bytes] = []
        self._wakeup = anyio.Event()
        self._writer_waiting = False
        self._close_requested = False
        self._closed = False
        self._cancel_scope: anyio.CancelScope | None = None
        self.identify_answer: dict = {}
        self.auth_answer: dict = {}
        self.max_rdy = DEFAULT_MAX_RDY_COUNT
        self.rdy = 0
        self.in_flight = 0
        self.finished = 0
        self.answers_watched = False  # the delegate wants on_finished (in backoff, or closing)
        self.last_rdy_time = 0.0
        self.last_message_time = anyio.current_time()
        self.closing = False
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.address}>"

    # -- handshake -------------------------------------------------------------------

    async def connect(self) -> dict:
        """Dial, IDENTIFY, upgrade, AUTH; IDENTIFY's answer (empty if nsqd answered a plain OK)."""
        host, port = split_address(self.address)
        config = self.config
        try:
            with anyio.fail_after(config.dial_timeout):
                self._stream = await anyio.connect_tcp(host, port, local_host=config.local_addr or None)
        except (OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to nsqd at {self.address}: {exc or type(exc).__name__}") from None
        await self._handshake_step(self._identify, host)
        return self.identify_answer

    async def subscribe(self, topic: str, channel: str) -> None:
        """SUB, before ``run()``; raises ProtocolError if nsqd refuses."""
        await self._handshake_step(self._subscribe, topic, channel)

    async def _handshake_step(self, step, *args) -> None:
        """Run a handshake step; on failure close, and report a broken transport as ConnectError."""
        try:
            await step(*args)
        except NSQError:
            await self._abort_handshake()
            raise
        except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                FrameError, ValueError) as exc:
            await self._abort_handshake()
            raise ConnectError(f"connection to nsqd at {self.address} failed during the handshake: "
                               f"{exc or type(exc).__name__}") from None
        except BaseException:
            await self._abort_handshake()
            raise

    async def _identify(self, host: str) -> None:
        await self._stream.send(MAGIC_V2 + Identify(identify_body(self.config)).to_bytes())
        answer = await self._handshake_frame()
        if answer[:1] == b"{":
            self.identify_answer = json.loads(answer)
            self.max_rdy = self.identify_answer.get("max_rdy_count", DEFAULT_MAX_RDY_COUNT)
        await self._upgrade(host)
        if self.identify_answer.get("auth_required"):
            await self._auth()

    async def _subscribe(self, topic: str, channel: str) -> None:
        await self._send_now(Sub(topic, channel).to_bytes())
        self._expect_ok(await self._handshake_frame(), "SUB")

    async def _upgrade(self, host: str) -> None:
        answer, config = self.identify_answer, self.config
        if answer.get("tls_v1"):
            if self._parser.take_buffered():
                raise NSQError("nsqd sent data before the TLS handshake")
            self._stream = await TLSStream.wrap(self._stream, server_side=False, hostname=host,
                                                ssl_context=client_context(config), standard_compatible=False)
            self._expect_ok(await self._handshake_frame(), "TLS upgrade")
        if answer.get("snappy") or answer.get("deflate"):
            self._codec = SnappyCodec() if answer.get("snappy") else DeflateCodec(config.deflate_level)
            self._encode = self._codec.encode
            behind = self._parser.take_buffered()
            if behind:
                self._parser.receive_data(self._decoded(behind))
            self._expect_ok(await self._handshake_frame(), f"{self._codec.name} upgrade")

    async def _auth(self) -> None:
        if not self.config.auth_secret:
            raise AuthError("E_AUTH_FIRST", "nsqd requires AUTH and no auth_secret is set")
        await self._send_now(Auth(self.config.auth_secret.encode()).to_bytes())
        try:
            self.auth_answer = json.loads(await self._handshake_frame())
        except ProtocolError as exc:
            raise AuthError(exc.code, exc.description) from None
        log.info("(%s) Auth accepted. Identity: %r %s Permissions: %d", self.address,
                 self.auth_answer.get("identity"), self.auth_answer.get("identity_url"),
                 self.auth_answer.get("permission_count", 0))

    @staticmethod
    def _expect_ok(data: bytes, step: str) -> None:
        if data != b"OK":
            raise NSQError(f"invalid response from {step}: {data[:100]!r}")

    async def _send_now(self, data: bytes) -> None:
        with anyio.fail_after(self.config.write_timeout):
            await self._stream.send(self._encode(data) if self._encode else data)

    async def _handshake_frame(self) -> bytes:
        """The next response frame's data (heartbeats answered); an error frame raises."""
        while True:
            frame = self._parser.next_frame()
            if frame is None:
                self._parser.receive_data(await self._receive())
                continue
            frame_type, data = frame
            if frame_type == FRAME_TYPE_ERROR:
                raise ProtocolError(*split_error(data))
            if frame_type == FRAME_TYPE_RESPONSE and data == HEARTBEAT:
                await self._send_now(NOP)
                continue
            if frame_type != FRAME_TYPE_RESPONSE:
                raise NSQError(f"unexpected frame type {frame_type} during the handshake")
            return data

    async def _receive(self) -> bytes:
        with anyio.fail_after(self.config.read_timeout):
            data = await self._stream.receive(RECEIVE_SIZE)
        return self._decoded(data) if self._codec else data

    def _decoded(self, data: bytes) -> bytes:
        codec = self._codec
        data = codec.decode(data)
        if codec.backlog:
            pieces = [data]
            while codec.backlog:
                pieces.append(codec.decode(b""))
            data = b"".join(pieces)
        if codec.ended:
            raise ConnectionClosedError(f"nsqd at {self.address} ended the {codec.name} stream")
        return data

    async def _abort_handshake(self) -> None:
        self._closed = True
        if self._stream is not None:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()

    # -- running ---------------------------------------------------------------------

    async def run(self) -> None:
        """Read and write until the connection ends; then ``on_close``."""
        try:
            async with anyio.create_task_group() as task_group:
                self._cancel_scope = task_group.cancel_scope
                if self._closed:
                    task_group.cancel_scope.cancel()
                task_group.start_soon(self._until_ended, self._write_loop)
                await self._until_ended(self._read_loop)
        finally:
            self._closed = True
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            self._delegate.on_close(self, self.error)

    async def _until_ended(self, loop) -> None:
        try:
            await loop()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._record(ConnectionClosedError(f"connection to nsqd at {self.address} closed ({type(exc).__name__})"))
        except (OSError, TimeoutError, FrameError, NSQError, ValueError) as exc:
            self._record(exc)
        finally:
            self._cancel_scope.cancel()

    def _record(self, error: BaseException) -> None:
        if self.error is None and not (self._close_requested and isinstance(error, ConnectionClosedError)):
            self.error = error

    async def _read_loop(self) -> None:
        parser, delegate, receive = self._parser, self._delegate, self._receive
        message_type, response_type = FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
        while True:
            parser.receive_data(await receive())
            batch = None
            for frame_type, data in parser.frames():
                if frame_type == message_type:
                    if len(data) < HEADER_LENGTH:
                        raise FrameError(f"invalid message frame of {len(data)} bytes")
                    if batch is None:
                        batch = [Message(data, self)]
                    else:
                        batch.append(Message(data, self))
                    continue
                if batch is not None:
                    self._deliver(batch)
                    batch = None
                if frame_type == response_type:
                    if data == HEARTBEAT:
                        self.send(NOP)
                    else:
                        delegate.on_response(self, data)
                elif frame_type == FRAME_TYPE_ERROR:
                    error = ProtocolError(*split_error(data))
                    if error.fatal:
                        self._record(error)
                    delegate.on_error(self, error)
                else:
                    raise FrameError(f"unknown frame type {frame_type}")
            if batch is not None:
                self._deliver(batch)

    def _deliver(self, messages: list[Message]) -> None:
        self.in_flight += len(messages)
        self.last_message_time = anyio.current_time()
        self._delegate.on_messages(self, messages)

    async def _write_loop(self) -> None:
        out, send = self._out, self._stream.send
        write_timeout = self.config.write_timeout
        while True:
            if not out:
                if self._close_requested:
                    return
                self._wakeup = anyio.Event()
                self._writer_waiting = True
                await self._wakeup.wait()
                continue
            data = b"".join(out) if len(out) > 1 else out[0]
            out.clear()
            if self._encode is not None:
                data = self._encode(data)
            with anyio.fail_after(write_timeout):
                await send(data)

    # -- commands --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue bytes for the writer."""
        if self._closed:
            return
        self._out.append(data)
        if self._writer_waiting:
            self._writer_waiting = False
            self._wakeup.set()

    def send_rdy(self, count: int) -> None:
        self.send(b"RDY %d\n" % count)

    def finish(self, message: Message) -> None:
        self.in_flight -= 1
        self.finished += 1
        if self._closed:
            return
        out = self._out
        out.append(FIN)
        out.append(message.id)
        out.append(NEWLINE)
        if self._writer_waiting:
            self._writer_waiting = False
            self._wakeup.set()
        if self.answers_watched:
            self._delegate.on_finished(self)

    def requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.in_flight -= 1
        if delay is None or delay < 0:
            delay = min(self.config.default_requeue_delay * message.attempts, self.config.max_requeue_delay)
        self.send(b"REQ %s %d\n" % (message.id, round(delay * 1000)))
        self._delegate.on_requeued(self, backoff)

    def touch(self, message: Message) -> None:
        self.send(b"TOUCH %s\n" % message.id)

    @property
    def closed(self) -> bool:
        return self._closed

    def close_when_flushed(self) -> None:
        """Write everything queued, then close."""
        self._close_requested = True
        if self._writer_waiting:
            self._writer_waiting = False
            self._wakeup.set()

    def close(self) -> None:
        """Close now; queued bytes are dropped."""
        self._closed = True
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()
