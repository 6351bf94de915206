"""The TCP side of nsqd: one reader, one writer and one timeout task per connection.

The reader parses whole batches of commands per receive and executes them without
awaiting; the writer sends the client's output buffer by the flush policy in
nsqd/client.py and owns the heartbeat; the timeout task sleeps until the earliest
in-flight deadline. Any failure of a connection ends that connection only.
"""

import logging

import trio

from common.errors import ClientError
from common.protocol_v2 import NEED_DATA

from .client import Client
from .protocol_v2 import ProtocolV2

log = logging.getLogger("nsqd")

RECEIVE_SIZE = 64 * 1024
# Stop reading a client whose unsent output passes this many bytes (one that
# publishes but never reads its OKs), until the writer has drained it.
OUTPUT_HIGH_WATER = 1024 * 1024
CLOSE_FLUSH_TIMEOUT = 1.0

DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError)


class Connection:
    def __init__(self, nsqd, stream, client_id: int, remote_address: str):
        self.nsqd = nsqd
        self.stream = stream
        self.client = Client(client_id, nsqd.opts, remote_address)
        self.protocol = ProtocolV2(nsqd, self.client)
        self._drained = trio.Event()
        self._scope = trio.CancelScope()
        self._closing = False

    def close(self) -> None:
        """Disconnect this client now (its channel was deleted, or nsqd is stopping)."""
        self._scope.cancel()

    async def run(self) -> None:
        client = self.client
        try:
            with self._scope:
                await self._serve()
        except* DISCONNECTED as group:
            log.debug("client %s: connection ended: %r", client.remote_address, group.exceptions[0])
        finally:
            if client.channel is not None:
                client.channel.remove_client(client)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self.stream.aclose()

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
        client, parser, execute = self.client, self.protocol.parser, self.protocol.execute
        while True:
            read_timeout = 2 * client.heartbeat_interval if client.heartbeat_interval > 0 else float("inf")
            with trio.move_on_after(read_timeout) as scope:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            if scope.cancelled_caught:
                log.info("client %s: no data for %ss, closing", client.remote_address, read_timeout)
                return
            if not data:
                return
            parser.receive_data(data)
            while True:
                try:
                    command = parser.next_event()
                    if command is NEED_DATA:
                        break
                    execute(command)
                except ClientError as err:
                    log.log(logging.ERROR if err.fatal else logging.INFO, "client %s: %s", client.remote_address, err)
                    client.send_error(err)
                    if err.fatal:
                        return
            if len(client.out) > OUTPUT_HIGH_WATER:
                self._drained = trio.Event()
                await self._drained.wait()

    async def _flush(self) -> None:
        data = self.client.take_output()
        if data:
            await self.stream.send_all(data)
        self._drained.set()

    async def _write_loop(self) -> None:
        """Send output by the flush policy and heartbeats; return once closing and flushed."""
        client = self.client
        interval = client.heartbeat_interval
        next_heartbeat = trio.current_time() + interval
        while True:
            client.output_changed = trio.Event()
            if self._closing:
                with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
                    await self._flush()
                return
            now = trio.current_time()
            if interval != client.heartbeat_interval:  # changed by IDENTIFY
                interval = client.heartbeat_interval
                next_heartbeat = now + interval
            if interval > 0 and now >= next_heartbeat:
                client.send_heartbeat()
                next_heartbeat = now + interval
            if client.out and (client.flush_now or now >= client.first_buffered_at + client.output_buffer_timeout):
                # a client that does not read for a heartbeat interval is gone (nsqd's write deadline)
                with trio.fail_after(interval or float("inf")):
                    await self._flush()
                continue
            wake_at = next_heartbeat if interval > 0 else float("inf")
            if client.out:
                wake_at = min(wake_at, client.first_buffered_at + client.output_buffer_timeout)
            with trio.move_on_at(wake_at):
                await client.output_changed.wait()

    async def _timeout_loop(self) -> None:
        """Requeue in-flight messages whose msg_timeout has passed."""
        client = self.client
        while True:
            client.timeouts_changed = trio.Event()
            with trio.move_on_at(client.next_deadline()):
                await client.timeouts_changed.wait()
            if client.channel is not None:
                client.expire(trio.current_time())
