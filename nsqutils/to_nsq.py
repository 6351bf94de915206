"""to_nsq: publish stdin, split on a delimiter byte, to a topic on every nsqd given
(apps/to_nsq/to_nsq.go).

Each non-empty piece is PUBlished to each ``--nsqd-tcp-address``, in input order; a refused
or failed publish is fatal (exit 1). NSQ's waits for each answer before the next publish;
here up to 256 publishes are pipelined on each connection (same order, ~30x the rate).
``--rate N`` keeps to N messages a second (with up to a second's worth of burst, as NSQ's).
End of input, SIGINT or SIGTERM stop the reading; the publishes under way are answered
before it exits. Unlike NSQ's, a last piece with no delimiter after it is published whole
(NSQ's drops its last byte).

stdin is read by a thread of its own (a pipe, a terminal or a file all block), handing
chunks to the event loop.
"""

import os
import sys
import threading
from contextlib import AsyncExitStack

import anyio
import anyio.from_thread
import anyio.lowlevel

from common.goflags import Flag
from nsqclient import NSQError, Producer

from . import golog, options
from .flagset import FlagSet
from .golog import Fatal
from .running import STOP_SIGNALS, run, watch_signals

PROGRAM = "to_nsq"
READ_SIZE = 64 * 1024
WINDOW = 256  # publishes awaiting nsqd's answer at once
FLAGS = FlagSet(PROGRAM, [
    options.VERSION_FLAG,
    Flag("topic", "str", "", "NSQ topic to publish to"),
    Flag("delimiter", "str", "\n", "character to split input from stdin"),
    Flag("nsqd-tcp-address", "list", [], "destination nsqd TCP address (may be given multiple times)"),
    options.PRODUCER_OPT,
    Flag("rate", "int", 0, "Throttle messages to n/second. 0 to disable"),
])


class Throttle:
    """At most ``rate`` messages a second: a bucket of up to ``rate`` tokens, one more every
    1/rate seconds, starting with one."""

    def __init__(self, rate: int):
        self.interval = 1.0 / rate
        self.capacity = rate
        self.tokens = 1.0
        self.updated = anyio.current_time()

    async def take(self) -> None:
        now = anyio.current_time()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) / self.interval)
        self.updated = now
        if self.tokens < 1:
            await anyio.sleep((1 - self.tokens) * self.interval)
            self.tokens, self.updated = 1.0, anyio.current_time()
        self.tokens -= 1


def _read_stdin(send_chunk, token) -> None:
    """The reader thread: chunks of stdin to the loop, then b"" (end of input) or the OSError."""
    fd = sys.stdin.fileno()
    chunk: bytes | OSError = b"-"
    while chunk:
        try:
            chunk = os.read(fd, READ_SIZE)
        except OSError as exc:
            chunk = exc
        try:
            anyio.from_thread.run(send_chunk, chunk, token=token)
        except (RuntimeError, anyio.BrokenResourceError):
            return  # the loop stopped reading: stopped by a signal, or finished
        if isinstance(chunk, OSError):
            return


async def _pieces(delimiter: bytes):
    """stdin split on ``delimiter``; empty pieces skipped."""
    send, receive = anyio.create_memory_object_stream(4)
    threading.Thread(target=_read_stdin, args=(send.send, anyio.lowlevel.current_token()),
                     name="stdin", daemon=True).start()
    pending = b""
    async with receive:
        async for chunk in receive:
            if isinstance(chunk, OSError):
                raise Fatal(f"failed to read stdin - {chunk}")
            if not chunk:
                break
            *pieces, pending = (pending + chunk).split(delimiter)
            for piece in pieces:
                if piece:
                    yield piece
    if pending:
        yield pending


async def _publish(producer: Producer, topic: str, body: bytes, window: anyio.Semaphore) -> None:
    try:
        await producer.publish(topic, body)
    except NSQError as exc:
        raise Fatal(str(exc)) from None
    finally:
        window.release()


async def _publish_stdin(opts, producers: list[Producer], reading: anyio.CancelScope) -> None:
    """Every piece to every producer, in order, up to WINDOW publishes awaiting nsqd's answer."""
    throttle = Throttle(opts.rate) if opts.rate >= 1 else None
    if throttle is not None:
        golog.printf(f"Throttling messages rate to max:{opts.rate}/second")
    window = anyio.Semaphore(WINDOW)
    async with anyio.create_task_group() as publishes:
        with reading:
            async for piece in _pieces(opts.delimiter.encode("utf-8", "surrogateescape")):
                if throttle is not None:
                    await throttle.take()
                for producer in producers:
                    if not producer.connected:
                        await _connect(producer)
                    await _take(window)
                    publishes.start_soon(_publish, producer, opts.topic, piece, window)


async def _take(window: anyio.Semaphore) -> None:
    """A place in the window, without yielding while there is one: the publishes of a whole
    chunk of input are then queued before the connection's writer runs, and leave in one write."""
    try:
        window.acquire_nowait()
    except anyio.WouldBlock:
        await window.acquire()


async def _connect(producer: Producer) -> None:
    """Connect before the first publish, so the pipelined ones leave in order."""
    try:
        await producer.connect()
    except NSQError as exc:
        raise Fatal(str(exc)) from None


async def _to_nsq(opts) -> None:
    if not opts.topic:
        raise Fatal("--topic required")
    if len(opts.delimiter.encode("utf-8", "surrogateescape")) != 1:
        raise Fatal("--delimiter must be a single byte")
    config = options.client_config(opts.producer_opt, PROGRAM)
    if not opts.nsqd_tcp_address:
        raise Fatal("--nsqd-tcp-address required")
    try:
        producers = [Producer(address, config) for address in dict.fromkeys(opts.nsqd_tcp_address)]
    except ValueError as exc:
        raise Fatal(f"failed to create nsq.Producer - {exc}") from None
    reading = anyio.CancelScope()
    async with AsyncExitStack() as stack:
        for producer in producers:
            await stack.enter_async_context(producer)
        async with anyio.create_task_group() as signals:
            await signals.start(watch_signals, lambda signum: reading.cancel(), STOP_SIGNALS)
            await _publish_stdin(opts, producers, reading)
            signals.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    golog.setup_client_log()
    return run(_to_nsq, opts)
