"""One nsqlookupd that this nsqd registers with (nsqd/lookup_peer.go, nsqd/lookup.go).

Each peer is a task that keeps a V1 connection up: connect, send the magic and IDENTIFY,
then REGISTER every topic and channel nsqd has, then forward registration changes as
they come and PING every 15 s. Any failure (refused, timed out, an error reply, a
closed connection) drops the connection; the peer reconnects with exponential backoff
and registers everything again, since nsqlookupd forgot all of it when the connection
went. Commands that arrive while disconnected are dropped for the same reason.
"""

import json
import logging
import math

import trio

from common import protocol_v1
from common.protocol_v1 import MAGIC_V1, Identify, Ping, ResponseReader

log = logging.getLogger("nsqd")

PING_INTERVAL = 15.0
DIAL_TIMEOUT = 1.0
RESPONSE_TIMEOUT = 1.0
BACKOFF_START = 1.0
BACKOFF_MAX = 15.0


class LookupPeerError(Exception):
    """The peer answered with an error or something that is not an answer."""


# What ends a session (and starts the reconnect backoff): refused, timed out, closed,
# an error answer or one that is not JSON where JSON is due.
SESSION_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                  protocol_v1.ResponseError, LookupPeerError, ValueError)


class LookupPeer:
    def __init__(self, address: str, nsqd):
        self.address = address
        self.nsqd = nsqd
        self.info: dict | None = None  # nsqlookupd's IDENTIFY answer while connected
        self._commands_in, self._commands_out = trio.open_memory_channel(math.inf)
        self._scope = trio.CancelScope()

    def __repr__(self) -> str:
        return f"<LookupPeer {self.address}>"

    def command(self, command) -> None:
        """Queue a REGISTER/UNREGISTER; dropped if not connected (a reconnect re-sends all)."""
        if self.info is not None:
            self._commands_in.send_nowait(command)

    def stop(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        backoff = BACKOFF_START
        with self._scope:
            while True:
                try:
                    await self._session()
                except* SESSION_ERRORS as group:
                    log.error("LOOKUPD(%s): %s", self.address, group.exceptions[0] or type(group.exceptions[0]).__name__)
                if self.info is not None:
                    backoff = BACKOFF_START
                self.info = None
                await trio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        host, _, port = self.address.rpartition(":")
        with trio.fail_after(DIAL_TIMEOUT):
            stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        async with stream, trio.open_nursery() as nursery:
            answers_in, answers = trio.open_memory_channel(math.inf)
            # nsqlookupd only ever answers; reading all the time notices a closed connection at once
            nursery.start_soon(self._read_answers, stream, answers_in)
            await stream.send_all(MAGIC_V1 + Identify(self.nsqd.lookup_identity()).to_bytes())
            self.info = json.loads(await self._answer(answers))
            log.info("LOOKUPD(%s): peer info %s", self.address, self.info)
            while True:  # anything queued before this connection is superseded by the full state
                try:
                    self._commands_out.receive_nowait()
                except trio.WouldBlock:
                    break
            await self._send_all(stream, answers, self.nsqd.registrations())
            await self._serve_commands(stream, answers)

    async def _read_answers(self, stream, answers_in) -> None:
        reader = ResponseReader(self.nsqd.opts.max_body_size)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise LookupPeerError("connection closed by nsqlookupd")
            reader.receive_data(data)
            while (answer := reader.next_response()) is not None:
                answers_in.send_nowait(answer)

    async def _serve_commands(self, stream, answers) -> None:
        while True:
            commands = []
            with trio.move_on_after(PING_INTERVAL):
                commands.append(await self._commands_out.receive())
            while True:
                try:
                    commands.append(self._commands_out.receive_nowait())
                except trio.WouldBlock:
                    break
            await self._send_all(stream, answers, commands or [Ping()])

    async def _send_all(self, stream, answers, commands: list) -> None:
        """Send commands in one write, then take one answer each; an error answer ends the session."""
        if not commands:
            return
        await stream.send_all(b"".join(command.to_bytes() for command in commands))
        for command in commands:
            answer = await self._answer(answers)
            if protocol_v1.is_error(answer):
                raise LookupPeerError(f"{type(command).__name__} failed: {answer.decode(errors='replace')}")

    @staticmethod
    async def _answer(answers) -> bytes:
        with trio.fail_after(RESPONSE_TIMEOUT):
            return await answers.receive()
