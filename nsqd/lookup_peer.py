"""One nsqlookupd that this nsqd registers with (nsqd/lookup_peer.go, nsqd/lookup.go).

Each peer is a task that keeps a V1 connection up: connect, send the magic and IDENTIFY,
then REGISTER every topic and channel nsqd has, then forward registration changes as
they come and PING every 15 s. Any failure (refused, timed out, an error reply, a
closed connection) drops the connection; the peer reconnects with exponential backoff
and registers everything again, since nsqlookupd forgot all of it when the connection
went. Commands that arrive while disconnected are dropped for the same reason.

The log lines are nsqd's (nsqd/lookup.go, nsqd/lookup_peer.go): ``LOOKUP connecting to ADDR``
at each dial, ``LOOKUPD(ADDR): peer info {TCPPort:.. HTTPPort:.. Version:.. BroadcastAddress:..}``
(Go's %+v of its peerInfo struct), each re-registration as ``LOOKUPD(ADDR): REGISTER t c``, the
heartbeat at debug level, and a failure as ``LOOKUPD(ADDR): <command> - <error>``.
"""

import json
import logging
import math
import os

import trio

from common import protocol_v1
from common.protocol_v1 import MAGIC_V1, Command, Identify, Ping, ResponseReader

from .slices import Steps, in_slices

log = logging.getLogger("nsqd")

PING_INTERVAL = 15.0
DIAL_TIMEOUT = 1.0
RESPONSE_TIMEOUT = 1.0
BACKOFF_START = 1.0
BACKOFF_MAX = 15.0
SEND_BYTES = 64 * 1024  # bytes a send, at most


class LookupPeerError(Exception):
    """The peer answered with an error or something that is not an answer."""


# What ends a session (and starts the reconnect backoff): refused, timed out, closed,
# an error answer or one that is not JSON where JSON is due.
SESSION_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                  protocol_v1.ResponseError, LookupPeerError, ValueError)


def command_text(command: Command) -> str:
    """A command as go-nsq's Command.String() gives it to nsqd's log: ``REGISTER t c``, ``PING``."""
    if isinstance(command, Identify):
        return "IDENTIFY"
    return line_text(command.to_bytes())


def line_text(data: bytes) -> str:
    """A one-line command's bytes as its text."""
    return data.decode("utf-8", "replace").rstrip("\n")


def peer_info_text(info: dict) -> str:
    """nsqlookupd's IDENTIFY answer as nsqd logs it: its peerInfo struct through Go's %+v."""
    return (f"{{TCPPort:{info.get('tcp_port', 0)} HTTPPort:{info.get('http_port', 0)} "
            f"Version:{info.get('version', '')} BroadcastAddress:{info.get('broadcast_address', '')}}}")


def _errno(exc: BaseException | None) -> int | None:
    """The first OS error number among an exception's causes (trio wraps connect failures in a group)."""
    while exc is not None:
        for inner in getattr(exc, "exceptions", None) or [exc]:
            if isinstance(getattr(inner, "errno", None), int) and inner.errno > 0:
                return inner.errno
        exc = exc.__cause__ or exc.__context__
    return None


def dial_error_text(address: str, exc: BaseException) -> str:
    """A failed connect in Go's net package's words: ``dial tcp ADDR: connect: connection refused``."""
    errno = _errno(exc)
    return f"dial tcp {address}: connect: {os.strerror(errno).lower()}" if errno else f"dial tcp {address}: {exc}"


class LookupPeer:
    def __init__(self, address: str, nsqd):
        self.address = address
        self.nsqd = nsqd
        self.info: dict | None = None  # nsqlookupd's IDENTIFY answer while connected
        self._awaiting: str | None = None  # the command whose answer is due (command_text), named in errors
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
                    error = group.exceptions[0]
                    doing = f"{self._awaiting} - " if self._awaiting else ""
                    log.error("LOOKUPD(%s): %s%s", self.address, doing, error or type(error).__name__)
                self._awaiting = None
                if self.info is not None:
                    backoff = BACKOFF_START
                self.info = None
                await trio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        host, _, port = self.address.rpartition(":")
        log.info("LOOKUP connecting to %s", self.address)
        try:
            with trio.fail_after(DIAL_TIMEOUT):
                stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        except trio.TooSlowError:
            raise LookupPeerError(f"dial tcp {self.address}: i/o timeout") from None
        except OSError as exc:
            raise LookupPeerError(dial_error_text(self.address, exc)) from exc
        async with stream, trio.open_nursery() as nursery:
            answers_in, answers = trio.open_memory_channel(math.inf)
            # nsqlookupd only ever answers; reading all the time notices a closed connection at once
            nursery.start_soon(self._read_answers, stream, answers_in)
            identify = Identify(self.nsqd.lookup_identity())
            self._awaiting = command_text(identify)
            await stream.send_all(MAGIC_V1 + identify.to_bytes())
            self.info = self._peer_info(await self._answer(answers))
            self._awaiting = None
            while True:  # anything queued before this connection is superseded by the full state
                try:
                    self._commands_out.receive_nowait()
                except trio.WouldBlock:
                    break
            await self._send(stream, answers, *await in_slices(self._registration_steps()))
            await self._serve_commands(stream, answers)

    def _peer_info(self, answer: bytes) -> dict:
        """nsqlookupd's IDENTIFY answer, logged; LookupPeerError if it is not one."""
        if protocol_v1.is_error(answer):
            raise LookupPeerError(answer.decode(errors="replace"))
        try:
            info = json.loads(answer)
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise LookupPeerError(f"parsing response - {answer.decode(errors='replace')}")
        log.info("LOOKUPD(%s): peer info %s", self.address, peer_info_text(info))
        if not info.get("broadcast_address"):
            log.error("LOOKUPD(%s): no broadcast address", self.address)
        return info

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
            if not commands:
                log.debug("LOOKUPD(%s): sending heartbeat", self.address)
            await self._send_all(stream, answers, commands or [Ping()])

    def _registration_steps(self) -> Steps[tuple[list[str], bytes]]:
        """Every REGISTER (nsqd.registrations) made, logged and encoded, a command a step (nsqd/slices.py):
        20,000 of 10,000 topics x 2 channels at once held the event loop 0.3 s at every connect. Their
        texts and bytes, not the commands, are kept for the answers: 20,000 tuples the collector walks."""
        texts, encoded = [], []
        for command in self.nsqd.registrations():
            data = command.to_bytes()
            texts.append(line_text(data))
            encoded.append(data)
            log.info("LOOKUPD(%s): %s", self.address, texts[-1])
            yield
        return texts, b"".join(encoded)

    async def _send_all(self, stream, answers, commands: list) -> None:
        await self._send(stream, answers, [command_text(command) for command in commands],
                         b"".join(command.to_bytes() for command in commands))

    async def _send(self, stream, answers, texts: list[str], encoded: bytes) -> None:
        """Send commands (their texts, and their bytes) in one write, then take one answer each; an
        error answer ends the session."""
        if not texts:
            return
        self._awaiting = texts[0]
        with memoryview(encoded) as data:  # 600 KB of REGISTERs in one send was a 25 ms step (loopback)
            for start in range(0, len(data), SEND_BYTES):
                await stream.send_all(data[start:start + SEND_BYTES])
        for text in texts:
            self._awaiting = text
            answer = await self._answer(answers)
            if protocol_v1.is_error(answer):
                raise LookupPeerError(answer.decode(errors="replace"))
        self._awaiting = None

    @staticmethod
    async def _answer(answers) -> bytes:
        with trio.fail_after(RESPONSE_TIMEOUT):
            return await answers.receive()
