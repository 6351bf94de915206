"""The TCP side of nsqd: one reader, one writer and one timeout task per connection.

The reader parses whole batches of commands per receive and executes them without
awaiting, except the few commands that must wait (IDENTIFY's upgrades, AUTH); the
writer sends the client's output buffer by the flush policy in nsqd/client.py; the
timeout task sleeps until the earliest in-flight deadline. Any failure of a connection
ends that connection only.

While the socket is plain (no TLS, no codec) the reader does not read: it parks in nsqd's
poller (nsqd/poller.py), which reads every ready plain connection from one epoll and executes
their commands as the reader would, and hands the reader back what must be awaited (a
command's coroutine, held OKs, an error, high water, the end); the reader sees to it,
executes the rest of what was received, and parks again. A connection that upgrades is
read by its reader through its stream.

Output that must go now and is made while commands execute is sent when that batch ends
(nsqd/output_batch.py): on a plain socket straight from that task with a non-blocking
write, when the writer is not sending and the socket takes it all; otherwise the writer
sends it. Reading plain sockets without trio's stream layer, with this batching, cut what a
lone PUB costs nsqd to a third; the poller cut what was left of trio's per-read bookkeeping.
The read deadline (2 x heartbeat interval, nsqd's) runs from when a read starts waiting, as
nsqd sets it before each read (for a parked reader, from the poller's last read); nsqd's one
heartbeat task (nsqd/heartbeats.py) sends the heartbeats and enforces the deadline for every
connection.

Layers: ``stream`` starts as the socket. IDENTIFY may put TLS (trio.SSLStream) and then
one compression (:class:`CompressedStream`) on top. The writer makes the change, since
it alone sends: it flushes the IDENTIFY answer as it is, shakes hands, sends ``OK``
through TLS, switches codec, sends ``OK`` compressed; meanwhile the reader waits, so
nothing is read across the switch. A plain connection never meets a codec; once a
connection upgrades, all its reads and writes go through its stream.
"""

import logging
import math
import os

import outcome
import trio

from common.compression import CompressionError
from common.errors import ClientError
from common.frames import OK
from common.protocol_v2 import NEED_DATA

from .client import Client
from .poller import ENDED, RECEIVE_SIZE
from .protocol_v2 import ProtocolV2
from .tls import tls_state

log = logging.getLogger("nsqd")

# Stop reading a client whose unsent output passes this many bytes (one that
# publishes but never reads its OKs), until the writer has drained it.
OUTPUT_HIGH_WATER = 1024 * 1024
CLOSE_FLUSH_TIMEOUT = 1.0
UPGRADE_TIMEOUT = 5.0  # nsqd's deadline for the TLS handshake

DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError, CompressionError)


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


class Connection:
    def __init__(self, nsqd, stream, client_id: int, remote_address: str):
        self.nsqd = nsqd
        self.stream = stream
        self.client = Client(client_id, nsqd.opts, remote_address)
        self.client.output_ready = self._output_ready
        self.protocol = ProtocolV2(nsqd, self.client, self.upgrade, self._identified)
        self.noted = False  # in nsqd's output batch
        # the socket's descriptor while it is a plain socket (no TLS, no codec), for direct reads and writes
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
        self._sending = False  # the writer is in the middle of a send
        self.read_since = trio.current_time()  # when the current read began waiting (inf: not reading)
        self.visit = None  # this connection's entry in nsqd's heartbeats
        self.heartbeat_due = math.inf
        self._upgrade_request = None
        self._upgraded = trio.Event()
        self._drained = trio.Event()
        self._scope = trio.CancelScope()
        self._closing = False

    def close(self) -> None:
        """Disconnect this client now (its channel was deleted, or nsqd is stopping)."""
        self._scope.cancel()

    def end(self) -> None:
        """Disconnect this client once what it has been sent is flushed (it went silent)."""
        self._closing = True
        self.client.output_changed.set()

    def _identified(self) -> None:
        self.nsqd.heartbeats.watch(self)  # IDENTIFY may have changed the interval

    async def run(self) -> None:
        client = self.client
        self.nsqd.heartbeats.watch(self)
        try:
            with self._scope:
                await self._serve()
        except* DISCONNECTED as group:
            log.debug("client %s: connection ended: %r", client.remote_address, group.exceptions[0])
        finally:
            self.nsqd.heartbeats.forget(self)
            self.fd = None
            if client.channel is not None:
                client.channel.remove_client(client)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self.stream.aclose()
            # the buffers go now, whatever reference cycles keep this connection for the collector
            self.protocol.parser.discard_buffered()
            client.out = bytearray()

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timeout_loop)
            nursery.start_soon(self._read_then_close)
            await self._write_loop()
            nursery.cancel_scope.cancel()

    async def _read_then_close(self) -> None:
        await self._read_loop()
        self._closing = True
        self.client.output_changed.set()

    async def _read_loop(self) -> None:
        client = self.client
        while True:
            try:
                pending = await self._next_commands()
            except ClientError as err:  # a command the poller executed failed
                if await self._refuse(err):
                    return
                pending = None
            if pending is ENDED:
                err = self.protocol.parser.receive_eof()
                if err is not None:  # the client's side ended in the middle of a command
                    await self._refuse(err)
                return
            if not await self._execute_received(pending):
                return
            if len(client.out) > OUTPUT_HIGH_WATER:
                self._drained = trio.Event()
                await self._drained.wait()

    async def _next_commands(self):
        """Received commands into the parser: by the poller while the socket is plain (with what
        it left to await, or ENDED), else read here (None, or ENDED)."""
        if self.fd is not None:
            return await self.nsqd.poller.serve(self)
        data = await self._receive()
        if not data:
            return ENDED
        self.protocol.parser.receive_data(data)
        return None

    async def _execute_received(self, pending) -> bool:
        """Execute the received commands, awaiting ``pending`` first and whatever else must be
        awaited; False once a fatal error has been sent."""
        parser, execute, batch = self.protocol.parser, self.protocol.execute, self.nsqd.output_batch
        while True:
            try:
                if pending is None:
                    batch.begin()
                    try:
                        pending = _execute_until_wait(parser, execute)
                    finally:
                        batch.end()
                    if pending is None:
                        if self.protocol.unanswered:
                            await self.protocol.answer_publishes()
                        return True
                await pending
            except ClientError as err:
                if await self._refuse(err):
                    return False
            pending = None

    def execute_polled(self, data: bytes):
        """Execute the commands the poller's read completed; None if nothing is left to await,
        else the outcome to hand this connection's task (nsqd/poller.py)."""
        self.protocol.parser.receive_data(data)
        try:
            pending = _execute_until_wait(self.protocol.parser, self.protocol.execute)
        except ClientError as err:
            # raised again in the task; its traceback here would tie these frames into a cycle
            return outcome.Error(err.with_traceback(None))
        if pending is not None or self.protocol.unanswered or len(self.client.out) > OUTPUT_HIGH_WATER:
            return outcome.Value(pending)
        return None

    async def _receive(self) -> bytes:
        """The next bytes from the client through its stream (b"" once it has closed)."""
        self.read_since = trio.current_time()
        try:
            return await self.stream.receive_some(RECEIVE_SIZE)
        finally:
            self.read_since = math.inf

    async def _refuse(self, err: ClientError) -> bool:
        """Send the error (after the publishes it followed); True if it closes the connection."""
        try:
            await self.protocol.answer_publishes()  # they came first
        except ClientError as failed:
            err = failed
        self.protocol.refuse(err)
        return err.fatal

    def _output_ready(self) -> None:
        """The client has output the flush policy may want sent: now, or when the batch ends."""
        if self.nsqd.output_batch.open:
            self.nsqd.output_batch.note(self)
        else:
            self.client.output_changed.set()

    def send_noted_output(self) -> None:
        """At a batch's end: write what must go now straight to a plain socket, else wake the writer."""
        client = self.client
        if not client.out:
            return
        if not client.flush_now or self.fd is None or self._sending:
            client.output_changed.set()
            return
        data = client.take_output()
        try:
            sent = os.write(self.fd, data)
        except OSError:  # would block, or the socket failed: the writer retries and reports
            sent = 0
        if sent < len(data):
            del data[:sent]
            data += client.out
            client.out = data
            client.flush_now = True
            client.output_changed.set()
        else:
            self._drained.set()

    async def upgrade(self, tls: bool, codec) -> None:
        """IDENTIFY's layers, asked for by the reader and put on by the writer."""
        self.fd = None
        parser = self.protocol.parser
        received = parser.take_buffered()
        if received and tls:
            # what came in the clear before the handshake is not taken as coming from the
            # TLS peer (the STARTTLS injection rule); nsqd drops it too, with its reader
            log.warning("client %s: dropped %d bytes sent before the TLS handshake", self.client.remote_address,
                        len(received))
            received = b""
        self._upgrade_request = (tls, codec, received)
        self._upgraded = trio.Event()
        self.client.output_changed.set()
        await self._upgraded.wait()
        if tls:
            parser.tls_established()

    async def _apply_upgrade(self) -> None:
        tls, codec, received = self._upgrade_request
        self._upgrade_request = None
        client = self.client
        try:
            with trio.fail_after(UPGRADE_TIMEOUT):
                await self._flush()  # the IDENTIFY answer, in the clear
                if tls:
                    log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", client.remote_address)
                    stream = trio.SSLStream(self.stream, self.nsqd.tls_context, server_side=True)
                    await stream.do_handshake()
                    self.stream = stream
                    client.tls = tls_state(stream)
                    await self._send_ok()
                if codec is not None:
                    log.info("PROTOCOL(V2): [%s] upgrading connection to %s", client.remote_address, codec.name)
                    self.stream = CompressedStream(self.stream, codec, received)
                    client.compression = codec.name
                    await self._send_ok()
        except DISCONNECTED as exc:
            log.error("PROTOCOL(V2): [%s] IDENTIFY failed %r", client.remote_address, exc)
            raise
        self._upgraded.set()

    async def _send_ok(self) -> None:
        self.client.send_response(OK)
        await self._flush()

    async def _flush(self) -> None:
        data = self.client.take_output()
        if data:
            self._sending = True
            try:
                await self.stream.send_all(data)
            finally:
                self._sending = False
        self._drained.set()

    async def _write_loop(self) -> None:
        """Send output by the flush policy; return once closing and flushed."""
        client = self.client
        while True:
            client.output_changed = trio.Event()
            if self._upgrade_request is not None:
                await self._apply_upgrade()
            if self._closing:
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self._flush()
                return
            if not client.out:
                await client.output_changed.wait()
                continue
            flush_at = client.first_buffered_at + client.output_buffer_timeout
            if client.flush_now or trio.current_time() >= flush_at:
                # a client that does not read for a heartbeat interval is gone (nsqd's write deadline)
                with trio.fail_after(client.heartbeat_interval or math.inf):
                    await self._flush()
                continue
            with trio.move_on_at(flush_at):
                await client.output_changed.wait()

    async def _timeout_loop(self) -> None:
        """Requeue in-flight messages whose msg_timeout has passed."""
        client = self.client
        while True:
            client.timeouts_changed = trio.Event()
            # a wake at a deadline whose message has gone (FIN) is harmless, so deliveries
            # wake this task only for a deadline earlier than the one it sleeps until
            client.timeouts_checked_at = client.next_deadline()
            with trio.move_on_at(client.timeouts_checked_at):
                await client.timeouts_changed.wait()
            if client.channel is not None:
                client.expire(trio.current_time())


def _execute_until_wait(parser, execute):
    """Execute the received commands until one must be awaited (returned) or more bytes are needed (None)."""
    while True:
        command = parser.next_event()
        if command is NEED_DATA:
            return None
        pending = execute(command)
        if pending is not None:
            return pending
