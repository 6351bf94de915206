"""Publish to one nsqd over one pipelined connection (go-nsq producer.go).

::

    async with Producer("127.0.0.1:4150") as producer:
        await producer.publish("events", b"hello")
        await producer.multi_publish("events", [b"a", b"b"])
        await producer.deferred_publish("events", 5.0, b"in five seconds")

Theory of operation:

* The Producer connects on first use and again after the connection is lost (nothing is
  retried: a publish that was pending when the connection ended raises
  :class:`ConnectionClosedError`, as nsqd may or may not have taken it).
* Any number of tasks may publish at once: each command is queued on the connection and its
  waiter appended to a FIFO; nsqd answers commands in order, so each ``OK`` or error frame
  completes the oldest waiter. The writer sends everything queued in one write.
* An error frame raises :class:`ProtocolError` carrying nsqd's code (``E_BAD_MESSAGE``,
  ``E_BAD_BODY``, ``E_PUB_FAILED``...). nsqd closes the connection after such an error, so
  publishes pipelined behind it raise ConnectionClosedError. Invalid topic names are refused
  before sending, with the code and text nsqd would answer (``E_BAD_TOPIC``).
* Options are go-nsq's (:class:`Config`), as a ``config`` or keyword arguments.
"""

import logging
from collections import deque

import anyio

from common.client_v2 import encode_mpub, invalid_topic
from common.commands import Dpub, Pub

from .config import Config, make_config
from .connection import Connection, split_address
from .errors import ConnectionClosedError, NSQError, ProtocolError, StoppedError

log = logging.getLogger("nsqclient")


class _Waiter:
    """One command's answer, to come."""

    __slots__ = ("event", "error")

    def __init__(self):
        self.event = anyio.Event()
        self.error: BaseException | None = None


class Producer:
    def __init__(self, address: str, config: Config | None = None, **options):
        split_address(address)
        self.address = address
        self.config = make_config(config, options)
        self._conn: Connection | None = None
        self._waiters: dict[Connection, deque[_Waiter]] = {}
        self._connect_lock = anyio.Lock()
        self._task_group = None
        self._stopped = False

    async def __aenter__(self) -> "Producer":
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.stop()
        # the body's own exception propagates as it is, not wrapped in an ExceptionGroup
        await self._task_group.__aexit__(None, None, None)

    def stop(self) -> None:
        """Close the connection; pending and later publishes raise."""
        self._stopped = True
        if self._conn is not None:
            self._conn.close()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def pending(self) -> int:
        """Commands sent and not answered yet."""
        return sum(len(waiters) for waiters in self._waiters.values())

    async def connect(self) -> None:
        """Connect now (publishing connects on demand)."""
        await self._connection()

    async def ping(self) -> None:
        """go-nsq's Ping: connect if not connected."""
        await self._connection()

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message."""
        self._check_topic("PUB", topic)
        await self._command(Pub(topic, body).to_bytes())

    async def multi_publish(self, topic: str, bodies) -> None:
        """MPUB several messages at once (all or none)."""
        self._check_topic("MPUB", topic)
        await self._command(encode_mpub(topic, bodies))

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB: the message is delivered after ``delay`` seconds."""
        self._check_topic("DPUB", topic)
        await self._command(Dpub(topic, round(delay * 1000), body).to_bytes())

    @staticmethod
    def _check_topic(command: str, topic: str) -> None:
        refused = invalid_topic(command, topic)
        if refused is not None:
            raise ProtocolError(*refused)

    async def _command(self, data: bytes) -> None:
        conn = self._conn if self._conn is not None else await self._connection()
        waiter = _Waiter()
        self._waiters[conn].append(waiter)
        conn.send(data)
        await waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error

    async def _connection(self) -> Connection:
        if self._task_group is None:
            raise NSQError("use the Producer in `async with Producer(...) as producer:`")
        async with self._connect_lock:
            if self._stopped:
                raise StoppedError("producer stopped")
            if self._conn is None:
                log.info("(%s) connecting to nsqd", self.address)
                conn = Connection(self.address, self.config, self)
                await conn.connect()
                self._conn = conn
                self._waiters[conn] = deque()
                self._task_group.start_soon(conn.run)
            return self._conn

    # -- connection delegate -----------------------------------------------------------

    def on_response(self, conn: Connection, data: bytes) -> None:
        self._complete(conn, None)

    def on_error(self, conn: Connection, error: ProtocolError) -> None:
        if error.fatal and conn is self._conn:
            self._conn = None  # nsqd is closing it: the next publish connects anew
        self._complete(conn, error)

    def _complete(self, conn: Connection, error: BaseException | None) -> None:
        waiters = self._waiters.get(conn)
        if not waiters:
            log.error("(%s) answer with no command waiting for it: %s", self.address, error or "OK")
            return
        waiter = waiters.popleft()
        waiter.error = error
        waiter.event.set()

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        if conn is self._conn:
            self._conn = None
        if error is not None and not self._stopped:
            log.error("(%s) connection closed: %s", self.address, error)
        reason = StoppedError("producer stopped") if self._stopped else ConnectionClosedError(
            f"connection to nsqd at {self.address} closed before the command was answered ({error})")
        for waiter in self._waiters.pop(conn, ()):
            waiter.error = reason
            waiter.event.set()

    def on_messages(self, conn: Connection, messages) -> None:
        log.error("(%s) producer received %d messages", self.address, len(messages))

    def on_finished(self, conn: Connection) -> None:
        pass

    def on_requeued(self, conn: Connection, backoff: bool) -> None:
        pass
