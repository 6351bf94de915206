"""One client connection, the protocol side: every rule of a connection, whatever its I/O.

Theory of operation. A Connection owns all of a connection's state: the client (nsqd/client.py:
identity, subscription, RDY, messages in flight, the output buffer and its flush policy), the
command parser and executor (nsqd/protocol_v2.py), the read deadline, the next heartbeat and
the task that times messages out; no other module writes any of it. Its I/O is its backend's
(nsqd/io_backend.py: the Linux fast path or the portable trio streams), asked through a small
interface: receive, send, send now, close, and the clock.

Receiving. The connection's task asks its backend to receive; the backend hands each read to
``received`` (``received_in_round`` inside the fast path's rounds, which batch output across
connections themselves), which executes the commands it completed without awaiting, until one
must be awaited: IDENTIFY's upgrades, AUTH, any command checked against an auth server
(PUB/MPUB/DPUB/SUB with AUTH on), and a PUB/MPUB/DPUB/SUB that creates its topic (answered
once the topic has started, nsqd.get_started_topic). That, held OKs (--sync-every=1), a
command's error and output past OUTPUT_HIGH_WATER (a client that publishes but never reads its
OKs) go back to the task, which sees to them, executes the rest of what it received and
receives again. Any failure ends this connection only. Whenever the commands stop (the read
is done, or one must be awaited), the client is refilled with the messages its FINs, REQs and
RDYs made room for: once all of them have been applied, not after each (nsqd/client.py).

Sending. Output made while commands execute (an OK, messages a PUB or FIN freed for this
client) is noted in nsqd's output batch and, when the batch ends, what the flush policy says
must go now is written straight to the socket if the backend can (``direct``: the fast path,
one non-blocking write) and the writer task is not sending; otherwise, and for what the policy
says may wait (output_buffer_size, output_buffer_timeout), the writer task sends it. The
connection whose read made the output does not wait for the batch's end: its output goes once
that read's commands are done, and the batch's end sends what the round's later reads add. Output
made outside a batch (timeouts, deferred messages, HTTP publishes) wakes the writer at once.

Time. The read deadline (2 x heartbeat interval, nsqd's) runs from the connection's last read,
or from when it began receiving, as nsqd sets it before each read; while the task awaits
something else it does not run. nsqd's one heartbeat task (nsqd/heartbeats.py) visits each
connection when a heartbeat or its read deadline is due (``visit``). Every clock read is the
backend's ``now`` (trio's), which trio.testing.MockClock drives in the tests.

Upgrades. IDENTIFY may put TLS and then one compression on the connection. The writer makes
the change, since it alone sends: it flushes the IDENTIFY answer as it is, shakes hands, sends
``OK`` through TLS, switches codec, sends ``OK`` compressed; meanwhile the task waits, so nothing
is read across the switch. The connection then has a portable backend over the new layers.
"""

import logging
import math

import outcome
import trio

from common.compression import CompressionError
from common.errors import ClientError
from common.frames import HEARTBEAT_FRAME, OK
from common.protocol_v2 import NEED_DATA

from .client import Client
from .heartbeat_grid import heartbeat_time
from .io_backend import ENDED
from .protocol_v2 import ProtocolV2
from .tls import tls_state

log = logging.getLogger("nsqd")

# Stop reading a client whose unsent output passes this many bytes (one that
# publishes but never reads its OKs), until the writer has drained it.
OUTPUT_HIGH_WATER = 1024 * 1024
CLOSE_FLUSH_TIMEOUT = 1.0
UPGRADE_TIMEOUT = 5.0  # nsqd's deadline for the TLS handshake

DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError, CompressionError)


class Connection:
    def __init__(self, nsqd, backend, client_id: int, remote_address: str):
        self.nsqd = nsqd
        self.backend = backend
        self.client = Client(client_id, nsqd.opts, remote_address, self._output_ready, self._earlier_deadline)
        self.protocol = ProtocolV2(nsqd, self.client, self.upgrade, self._identified)
        # for every read
        self._parser, self._execute, self._refill = self.protocol.parser, self.protocol.execute, self.client.refill
        self._direct = backend.direct  # output that must go now may be written from the batch's end
        self._noted = False  # in nsqd's output batch
        self._sending = False  # the writer is in the middle of a send
        self._read_since = backend.now()  # the read deadline runs from here (inf: not receiving)
        self._heartbeat_due = math.inf
        self._output_changed = trio.Event()
        self._timeouts_changed = trio.Event()
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
        self._output_changed.set()

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
            self._direct = False
            if client.channel is not None:
                client.channel.remove_client(client)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self.backend.aclose()
            # the buffers go now, whatever reference cycles keep this connection for the collector
            self.protocol.parser.discard_buffered()
            client.discard_output()

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timeout_loop)
            nursery.start_soon(self._read_then_close)
            await self._write_loop()
            nursery.cancel_scope.cancel()

    # -- receiving -----------------------------------------------------------------------

    async def _read_then_close(self) -> None:
        await self._read_loop()
        self.end()

    async def _read_loop(self) -> None:
        while True:
            pending = await self._receive()
            await self.nsqd.turns.take()  # what the poller hands back to many tasks at once
            if isinstance(pending, ClientError):  # a command the backend handed over failed
                if await self._refuse(pending):
                    return
                pending = None
            if pending is ENDED:
                err = self.protocol.parser.receive_eof()
                if err is not None:  # the client's side ended in the middle of a command
                    await self._refuse(err)
                return
            if not await self._execute_received(pending):
                return
            if len(self.client.out) > OUTPUT_HIGH_WATER:
                self._drained = trio.Event()
                await self._drained.wait()

    async def _receive(self):
        """What the backend hands back (nsqd/io_backend.py), or the ClientError it raised.
        The read deadline runs only meanwhile."""
        self._read_since = self.backend.now()
        try:
            return await self.backend.receive(self)
        except ClientError as err:
            return err
        finally:
            self._read_since = math.inf  # not receiving while this task works

    def received(self, data: bytes, now: float):
        """A read's bytes, from a backend: ``received_in_round`` in an output batch of its own."""
        batch = self.nsqd.output_batch
        batch.begin()
        try:
            return self.received_in_round(data, now)
        finally:
            batch.end()

    def received_in_round(self, data: bytes, now: float):
        """A read's bytes, in a backend's round of reads (in its output batch): execute the
        commands they complete. None if the backend may read on; else the outcome to hand the
        connection's task: what to await first (a coroutine, or None), or a command's error."""
        self._read_since = now
        parser = self._parser
        if not self.protocol.unanswered and parser.take_lone_nop(data):
            # a heartbeat's answer, most of what an idle nsqd reads: no command, so no answer, no
            # output and no room made for messages (every read's commands refill the client before
            # its next read): nothing to hand back or send
            return None
        parser.receive_data(data)
        try:
            pending = _execute_until_wait(parser, self._execute, self._refill)
        except ClientError as err:
            # raised again in the task; its traceback here would tie these frames into a cycle
            return outcome.Error(err.with_traceback(None))
        if pending is not None or self.protocol.unanswered or len(self.client.out) > OUTPUT_HIGH_WATER:
            return outcome.Value(pending)
        if self._noted:
            # this read's answers go now, not after the round's other reads: a publisher that
            # waits for its OK sends again meanwhile, as each of nsqd's connections is answered
            # by its own goroutine (measured under NSQ's bench_writer: the round's publishers
            # went in lockstep, nsqd idle while they all made their next MPUB)
            self.send_noted_output()
        return None

    async def _execute_received(self, pending) -> bool:
        """Await ``pending``, then execute the rest of the received commands, awaiting whatever
        else must be awaited; False once a fatal error has been sent."""
        parser, execute, refill, batch = self._parser, self._execute, self._refill, self.nsqd.output_batch
        while True:
            try:
                if pending is None:
                    batch.begin()
                    try:
                        pending = _execute_until_wait(parser, execute, refill)
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

    async def _refuse(self, err: ClientError) -> bool:
        """Send the error (after the publishes it followed); True if it closes the connection."""
        try:
            await self.protocol.answer_publishes()  # they came first
        except ClientError as failed:
            err = failed
        self.protocol.refuse(err)
        return err.fatal

    # -- sending -------------------------------------------------------------------------

    def _output_ready(self) -> None:
        """The client has output the flush policy may want sent: now, or when the batch ends."""
        batch = self.nsqd.output_batch
        if batch.open:
            if not self._noted:
                self._noted = True
                batch.note(self)
        else:
            self._output_changed.set()

    def send_noted_output(self) -> None:
        """At a batch's end: write what must go now straight to the socket if the backend can,
        else wake the writer."""
        self._noted = False
        client = self.client
        if not client.out:
            return
        if not client.flush_now or not self._direct or self._sending:
            self._output_changed.set()
            return
        if self._send_now(client.take_output()):
            self._drained.set()

    def _send_now(self, data: bytes | bytearray) -> bool:
        """One non-blocking write of ``data`` (the output taken, nothing else waiting to go); what
        the socket did not take goes back to the client's output for the writer. True if it took all."""
        try:
            sent = self.backend.send_now(data)
        except OSError:  # would block, or the socket failed: the writer retries and reports
            sent = 0
        if sent < len(data):
            self.client.keep_unsent(data, sent)
            self._output_changed.set()
            return False
        return True

    async def _flush(self) -> None:
        data = self.client.take_output()
        if data:
            self._sending = True
            try:
                await self.backend.send(data)
            finally:
                self._sending = False
        self._drained.set()

    async def _write_loop(self) -> None:
        """Send output by the flush policy; return once closing and flushed."""
        client = self.client
        while True:
            self._output_changed = trio.Event()
            if self._upgrade_request is not None:
                await self._apply_upgrade()
            if self._closing:
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self._flush()
                return
            if not client.out:
                await self._output_changed.wait()
                continue
            flush_at = client.first_buffered_at + client.output_buffer_timeout
            if client.flush_now or self.backend.now() >= flush_at:
                # a client that does not read for a heartbeat interval is gone (nsqd's write deadline)
                with trio.fail_after(client.heartbeat_interval or math.inf):
                    await self._flush()
                continue
            with trio.move_on_at(flush_at):
                await self._output_changed.wait()

    # -- upgrades --------------------------------------------------------------------------

    async def upgrade(self, tls: bool, codec) -> None:
        """IDENTIFY's layers, asked for by the task and put on by the writer."""
        self._direct = False
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
        self._output_changed.set()
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
                    async with self.nsqd.tls_handshakes:  # a few at a time: each step holds the loop
                        self.backend = await self.backend.start_tls(self.nsqd.tls_context, self.nsqd.turns)
                    client.set_tls(tls_state(self.backend.stream))
                    await self._send_ok()
                if codec is not None:
                    log.info("PROTOCOL(V2): [%s] upgrading connection to %s", client.remote_address, codec.name)
                    self.backend = self.backend.compress(codec, received)
                    client.set_compression(codec.name)
                    await self._send_ok()
        except DISCONNECTED as exc:
            log.error("PROTOCOL(V2): [%s] IDENTIFY failed %r", client.remote_address, exc)
            raise
        self._upgraded.set()

    async def _send_ok(self) -> None:
        self.client.send_response(OK)
        await self._flush()

    # -- time ------------------------------------------------------------------------------

    def _earlier_deadline(self) -> None:
        """A message in flight is due before the timeout task's next wake."""
        self._timeouts_changed.set()

    async def _timeout_loop(self) -> None:
        """Requeue in-flight messages whose msg_timeout has passed."""
        client = self.client
        while True:
            self._timeouts_changed = trio.Event()
            # a wake at a deadline whose message has gone (FIN) is harmless, so deliveries
            # wake this task only for a deadline earlier than the one it sleeps until
            with trio.move_on_at(client.watch_next_deadline()):
                await self._timeouts_changed.wait()
            if client.channel is not None:
                client.expire(self.backend.now())

    def start_heartbeats(self, now: float) -> float | None:
        """Heartbeats from ``now`` at the client's interval: when the first visit is due
        (None when the client turned them off)."""
        interval = self.client.heartbeat_interval
        self._heartbeat_due = heartbeat_time(now + interval, interval) if interval > 0 else math.inf
        return self._heartbeat_due if interval > 0 else None

    def visit(self, now: float, slack: float) -> float | None:
        """nsqd's heartbeat task's visit: close the connection if it has been silent past its
        read deadline (then None), send a heartbeat if one is due within ``slack``; when the
        next visit is due. The deadline moves with every read, so the visit reads it as it is."""
        client = self.client
        interval = client.heartbeat_interval
        read_deadline = self._read_since + 2 * interval
        if now >= read_deadline:
            log.info("client %s: no data for %ss, closing", client.remote_address, 2 * interval)
            self.end()
            return None
        heartbeat_due = self._heartbeat_due
        if now + slack >= heartbeat_due:
            self._send_heartbeat()
            heartbeat_due = self._heartbeat_due = heartbeat_time(now + interval, interval)
        return heartbeat_due if heartbeat_due < read_deadline else read_deadline

    def _send_heartbeat(self) -> None:
        """Straight to the socket, one constant frame, when nothing else waits to go and the
        backend can write at once: thousands of idle consumers make this most of an idle nsqd's
        work. Otherwise (or for what the socket did not take) through the client's output, after
        what is there, like any frame. Nothing waits for the output to drain then (the read loop
        waits only while output is buffered, and whoever took it last said so), so a whole write
        says nothing."""
        client = self.client
        if client.out or not self._direct or self._sending or self._closing:
            client.send_heartbeat()
            return
        self._send_now(HEARTBEAT_FRAME)


def _execute_until_wait(parser, execute, refill):
    """Execute the received commands until one must be awaited (returned) or more bytes are
    needed (None), then ``refill`` the client with the messages they made room for. A command's
    error skips the refill: the task sends the error, then executes on and refills."""
    while True:
        command = parser.next_event()
        if command is NEED_DATA:
            refill()
            return None
        pending = execute(command)
        if pending is not None:
            refill()
            return pending
