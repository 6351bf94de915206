"""to_nsq: publish stdin, split on a delimiter byte, to a topic on every nsqd given
(apps/to_nsq/to_nsq.go).

Each non-empty piece is PUBlished to each ``--nsqd-tcp-address`` in turn, waiting for nsqd's
answer; a refused or failed publish is fatal (exit 1). ``--rate N`` keeps to N messages a
second (with up to a second's worth of burst, as NSQ's). End of input, SIGINT or SIGTERM
ends it after the publish under way has been answered. Unlike NSQ's, a last piece with no
delimiter after it is published whole (NSQ's drops its last byte).

stdin is read by a thread of its own (a pipe, a terminal or a file all block), handing
chunks to the event loop.
"""

import os
import sys
import threading

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


async def _publish_all(producers: list[Producer], topic: str, body: bytes) -> None:
    for producer in producers:
        try:
            await producer.publish(topic, body)
        except NSQError as exc:
            raise Fatal(str(exc)) from None


async def _publish_stdin(opts, producers: list[Producer], scope: anyio.CancelScope) -> None:
    throttle = Throttle(opts.rate) if opts.rate >= 1 else None
    if throttle is not None:
        golog.printf(f"Throttling messages rate to max:{opts.rate}/second")
    async for piece in _pieces(opts.delimiter.encode("utf-8", "surrogateescape")):
        if throttle is not None:
            await throttle.take()
        with anyio.CancelScope(shield=True):  # a stop signal waits for the publish under way
            await _publish_all(producers, opts.topic, piece)
    scope.cancel()


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
    async with anyio.create_task_group() as task_group:
        for producer in producers:
            await task_group.start(_run_producer, producer)
        await task_group.start(watch_signals, lambda signum: task_group.cancel_scope.cancel(), STOP_SIGNALS)
        await _publish_stdin(opts, producers, task_group.cancel_scope)


async def _run_producer(producer: Producer, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    async with producer:
        task_status.started()
        await anyio.sleep_forever()


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    golog.setup_client_log()
    return run(_to_nsq, opts)
