"""Consume a topic's channel from every nsqd that has it (go-nsq consumer.go).

::

    async def handler(message: Message) -> None:
        print(message.body)          # return: FIN; raise: REQ with backoff

    async with Consumer("events", "archive", handler, lookupd_http_addresses=["127.0.0.1:4161"],
                        max_in_flight=100) as consumer:
        await consumer.wait_stopped()    # until consumer.stop() is called elsewhere

or ``await consumer.run()`` inside a task group of one's own (``await task_group.start(consumer.run)``
returns once the first connections and the first nsqlookupd query are done).

Theory of operation:

* Connections: to every nsqd given (``nsqd_tcp_addresses``, :meth:`connect_to_nsqd`) and every
  nsqd an nsqlookupd lists (:mod:`.lookupd_poller`). Each is IDENTIFYed with the Config's
  options (TLS, snappy/deflate, AUTH, sample_rate, output buffering...) and SUBscribed.
  When one closes, the Consumer asks nsqlookupd again, or, with no nsqlookupd, reconnects to
  the nsqd it was given (1 s doubling up to ``lookupd_poll_interval``).
* Flow: ``max_in_flight`` is spread over the connections by :mod:`.rdy`'s rules (again each
  time an nsqd comes or goes), and taken back by :mod:`.backoff`'s when the handler fails.
* Handling: ``concurrency`` worker tasks (1 by default, like go-nsq's AddHandler) take
  messages in arrival order. A message past ``max_attempts`` goes to ``on_give_up`` (sync or
  async) and is finished without the handler. A handler that returns finishes its message; one
  that raises requeues it (``default_requeue_delay`` x attempts, backoff); a handler that
  answered itself, or disabled auto-response, is left alone. Heartbeats are answered by the
  connection itself.
* ``stop()``: CLS to every nsqd, so no more messages come; handlers finish what was received;
  each connection closes once nothing is in flight on it. After ``stop_timeout`` seconds
  (30, go-nsq's) the messages still waiting or being handled are requeued at once (REQ 0, no
  backoff) and the handlers cancelled.
"""

import inspect
import logging
import random
from collections import deque
from typing import Awaitable, Callable, NamedTuple

import anyio

from common.client_v2 import invalid_channel, invalid_topic
from common.frames import CLOSE_WAIT

from . import rdy
from .backoff import EXIT, BackoffState, Signal, reconnect_delay, strategy
from .config import Config, make_config
from .connection import Connection, split_address
from .errors import NSQError, ProtocolError, StoppedError
from .lookupd_poller import LookupdPoller
from .message import Message

log = logging.getLogger("nsqclient")

Handler = Callable[[Message], Awaitable[None]]
CLS = b"CLS\n"
STOP_TIMEOUT = 30.0
FORCED_CLOSE_GRACE = 1.0


def _is_async_callable(handler) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


class ConsumerStats(NamedTuple):
    messages_received: int
    messages_finished: int
    messages_requeued: int
    connections: int


class Consumer:
    def __init__(self, topic: str, channel: str, handler: Handler, *, nsqd_tcp_addresses=(),
                 lookupd_http_addresses=(), concurrency: int = 1,
                 on_give_up: Callable[[Message], object] | None = None, stop_timeout: float = STOP_TIMEOUT,
                 config: Config | None = None, **options):
        for refused in (invalid_topic("SUB", topic), invalid_channel(channel)):
            if refused is not None:
                raise ProtocolError(*refused)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not _is_async_callable(handler):
            raise TypeError(f"the handler must be an async function, not {handler!r}")
        self.topic = topic
        self.channel = channel
        self.config = make_config(config, options)
        self._handler = handler
        self._on_give_up = on_give_up
        self._concurrency = concurrency
        self._stop_timeout = stop_timeout
        self._rng = random.Random()
        self._max_in_flight = self.config.max_in_flight
        self._backoff = BackoffState(strategy(self.config.backoff_strategy, self.config.backoff_multiplier, self._rng),
                                     self.config.max_backoff_duration)
        self._nsqd_addresses: list[str] = list(dict.fromkeys(nsqd_tcp_addresses))
        for address in self._nsqd_addresses:
            split_address(address)
        self._poller = LookupdPoller(topic, self.config, self._connect_discovered, self._rng)
        for address in lookupd_http_addresses:
            self._poller.add(address)
        self._conns: dict[str, Connection] = {}
        self._pending: set[str] = set()
        self._total_rdy = 0
        self._need_redistribution = False
        self._rdy_retries: dict[Connection, anyio.CancelScope] = {}
        self._queue: deque[Message] = deque()
        self._work = anyio.Event()
        self._workers_waiting = False
        self._workers_scope: anyio.CancelScope | None = None
        self._poller_scope: anyio.CancelScope | None = None
        self._task_group = None
        self._outer_task_group = None
        self._stopping = False
        self._stopped = anyio.Event()
        self._received = self._finished_on_closed = self._requeued = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> "Consumer":
        self._outer_task_group = anyio.create_task_group()
        await self._outer_task_group.__aenter__()
        try:
            await self._outer_task_group.start(self.run)
        except BaseException:
            self._outer_task_group.cancel_scope.cancel()
            await self._outer_task_group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.stop()
        await self._outer_task_group.__aexit__(None, None, None)

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, consume until stopped and every connection has closed."""
        if self._task_group is not None:
            raise NSQError("the consumer is already running")
        if not self._nsqd_addresses and not self._poller.endpoints:
            raise NSQError("no nsqd_tcp_addresses or lookupd_http_addresses to consume from")
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._rdy_loop)
            await task_group.start(self._run_workers)
            async with anyio.create_task_group() as first_connections:
                for address in self._nsqd_addresses:
                    first_connections.start_soon(self._connect_or_reconnect, address)
            if self._poller.endpoints:
                await task_group.start(self._run_poller)
            task_status.started()
            await self._stopped.wait()
            task_group.cancel_scope.cancel()

    def stop(self) -> None:
        """Begin a graceful stop (see the module's docstring); ``wait_stopped()`` waits for its end."""
        if self._stopping:
            return
        self._stopping = True
        log.info("[%s/%s] stopping...", self.topic, self.channel)
        if self._poller_scope is not None:
            self._poller_scope.cancel()
        if not self._conns:
            self._stopped.set()
            return
        for conn in self._conns.values():
            self._start_closing(conn)
        self._task_group.start_soon(self._stop_deadline)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    @property
    def stats(self) -> ConsumerStats:
        finished = self._finished_on_closed + sum(conn.finished for conn in self._conns.values())
        return ConsumerStats(self._received, finished, self._requeued, len(self._conns))

    @property
    def connections(self) -> dict[str, Connection]:
        """Live connections by nsqd address (read-only view: ``rdy``, ``in_flight``, ``max_rdy``...)."""
        return dict(self._conns)

    @property
    def total_rdy(self) -> int:
        return self._total_rdy

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    @property
    def in_backoff(self) -> bool:
        return self._backoff.in_backoff

    def is_starved(self) -> bool:
        """Whether some connection has (nearly) all its RDY in flight."""
        return rdy.is_starved([(c.in_flight, c.rdy, c.closing) for c in self._conns.values()])

    def change_max_in_flight(self, max_in_flight: int) -> None:
        """A new max_in_flight, spread over the connections at once (0 pauses)."""
        if max_in_flight == self._max_in_flight:
            return
        self._max_in_flight = max_in_flight
        for conn in list(self._conns.values()):
            self._maybe_update_rdy(conn)

    # -- connections -------------------------------------------------------------------

    async def connect_to_nsqd(self, address: str) -> bool:
        """Connect and subscribe to one nsqd (kept and reconnected when no nsqlookupd is used).

        False if already connected or connecting; raises ConnectError / ProtocolError on failure."""
        if self._stopping:
            raise StoppedError("consumer stopped")
        if self._task_group is None:
            raise NSQError("the consumer is not running: use `async with` or run()")
        split_address(address)
        if address not in self._nsqd_addresses:
            self._nsqd_addresses.append(address)
        if address in self._conns or address in self._pending:
            return False
        self._pending.add(address)
        log.info("[%s/%s] (%s) connecting to nsqd", self.topic, self.channel, address)
        conn = Connection(address, self.config, self)
        try:
            answer = await conn.connect()
            await conn.subscribe(self.topic, self.channel)
        finally:
            self._pending.discard(address)
        if answer.get("max_rdy_count", self._max_in_flight) < self._max_in_flight:
            log.warning("(%s) max RDY count %d < consumer max in flight %d, truncation possible",
                        address, answer["max_rdy_count"], self._max_in_flight)
        self._conns[address] = conn
        conn.answers_watched = self._backoff.in_backoff
        self._task_group.start_soon(conn.run)
        if self._stopping:
            self._start_closing(conn)
            return True
        for other in list(self._conns.values()):
            if other is not conn:
                self._maybe_update_rdy(other)
        self._maybe_update_rdy(conn)
        return True

    def disconnect_from_nsqd(self, address: str) -> None:
        """Close the connection to this nsqd and forget it."""
        if address in self._nsqd_addresses:
            self._nsqd_addresses.remove(address)
        conn = self._conns.get(address)
        if conn is not None:
            conn.close()

    async def connect_to_nsqlookupd(self, address: str) -> None:
        """Discover nsqd through one more nsqlookupd (an ``http://host:port`` or ``host:port``)."""
        if not self._poller.add(address) or self._task_group is None:
            return
        if self._poller_scope is None:
            await self._task_group.start(self._run_poller)
        else:
            self._poller.recheck()

    def disconnect_from_nsqlookupd(self, address: str) -> None:
        """Stop polling this nsqlookupd (not the last one: go-nsq keeps at least one)."""
        if len(self._poller.endpoints) == 1 and address in self._poller:
            raise NSQError(f"cannot disconnect from only remaining nsqlookupd HTTP address {address}")
        self._poller.remove(address)

    async def _connect_or_reconnect(self, address: str) -> None:
        try:
            await self.connect_to_nsqd(address)
        except (NSQError, OSError) as exc:
            log.error("[%s/%s] (%s) error connecting to nsqd - %s", self.topic, self.channel, address, exc)
            self._task_group.start_soon(self._reconnect, address)

    async def _reconnect(self, address: str) -> None:
        attempt = 0
        while True:
            delay = reconnect_delay(attempt, self.config.lookupd_poll_interval)
            log.info("[%s/%s] (%s) re-connecting in %.3gs", self.topic, self.channel, address, delay)
            await anyio.sleep(delay)
            attempt += 1
            if self._stopping or address not in self._nsqd_addresses:
                return
            try:
                await self.connect_to_nsqd(address)
                return
            except (NSQError, OSError) as exc:
                log.error("[%s/%s] (%s) error connecting to nsqd - %s", self.topic, self.channel, address, exc)

    async def _run_poller(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.CancelScope() as scope:
            self._poller_scope = scope
            if self._stopping:
                scope.cancel()
            await self._poller.run(task_status=task_status)

    async def _connect_discovered(self, addresses: list[str]) -> None:
        for address in addresses:
            if self._stopping:
                return
            try:
                await self.connect_to_nsqd(address)
            except (NSQError, OSError, ValueError) as exc:
                log.error("[%s/%s] (%s) error connecting to nsqd - %s", self.topic, self.channel, address, exc)

    # -- connection delegate -----------------------------------------------------------

    def on_messages(self, conn: Connection, messages: list[Message]) -> None:
        self._received += len(messages)
        self._queue.extend(messages)
        if self._workers_waiting:
            self._workers_waiting = False
            self._work.set()

    def on_finished(self, conn: Connection) -> None:
        if self._backoff.in_backoff:
            self._signal(Signal.SUCCESS)
        if conn.closing and conn.in_flight <= 0:
            conn.close_when_flushed()

    def on_requeued(self, conn: Connection, backoff: bool) -> None:
        self._requeued += 1
        self._signal(Signal.FAILURE if backoff else Signal.CONTINUE)
        if conn.closing and conn.in_flight <= 0:
            conn.close_when_flushed()

    def on_response(self, conn: Connection, data: bytes) -> None:
        if data == CLOSE_WAIT:
            log.info("[%s/%s] (%s) received CLOSE_WAIT from nsqd", self.topic, self.channel, conn.address)
            conn.closing = conn.answers_watched = True
            if conn.in_flight <= 0:
                conn.close_when_flushed()

    def on_error(self, conn: Connection, error: ProtocolError) -> None:
        log.error("[%s/%s] (%s) protocol error - %s", self.topic, self.channel, conn.address, error)

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        address = conn.address
        if self._conns.get(address) is not conn:
            return
        if error is not None:
            log.error("[%s/%s] (%s) connection closed - %s", self.topic, self.channel, address, error)
        del self._conns[address]
        self._finished_on_closed += conn.finished
        conn_rdy = conn.rdy
        self._total_rdy -= conn_rdy
        had_retry = self._cancel_rdy_retry(conn)
        left = len(self._conns)
        log.log(logging.INFO if self._stopping else logging.WARNING, "[%s/%s] there are %d connections left alive",
                self.topic, self.channel, left)
        if (had_retry or conn_rdy > 0) and (left == self._max_in_flight or self._backoff.in_backoff):
            self._need_redistribution = True
        if self._stopping:
            if left == 0:
                self._stopped.set()
            return
        # go-nsq leaves the others' RDY as it was until the next connection comes; here they
        # take their larger share of max_in_flight at once
        for other in list(self._conns.values()):
            self._maybe_update_rdy(other)
        if self._poller.endpoints:
            self._poller.recheck()
        elif address in self._nsqd_addresses:
            self._task_group.start_soon(self._reconnect, address)

    # -- handlers ----------------------------------------------------------------------

    async def _run_workers(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as workers:
            self._workers_scope = workers.cancel_scope
            for index in range(self._concurrency):
                workers.start_soon(self._worker, index)
            task_status.started()

    async def _worker(self, index: int) -> None:
        """Handle messages in arrival order (the hot path: FIN is inlined)."""
        queue, handler = self._queue, self._handler
        max_attempts = self.config.max_attempts
        while True:
            if not queue:
                if not self._workers_waiting:
                    self._work = anyio.Event()
                    self._workers_waiting = True
                await self._work.wait()
                continue
            message = queue.popleft()
            conn = message._conn
            if conn.closed:
                continue  # its connection is gone: nsqd has requeued it
            if max_attempts and message.attempts > max_attempts:
                await self._give_up(message)
                continue
            try:
                await handler(message)
            except Exception as exc:
                log.error("[%s/%s] Handler returned error (%r) for msg %s", self.topic, self.channel, exc,
                          message.id.decode())
                if message._auto_response:
                    message.requeue()
                continue
            except BaseException:
                if not message._responded:  # cancelled at the stop timeout: back to nsqd at once
                    message.requeue(0, backoff=False)
                raise
            if message._auto_response and not message._responded:
                message._responded = True
                conn.finish(message)

    async def _give_up(self, message: Message) -> None:
        log.warning("[%s/%s] msg %s attempted %d times, giving up", self.topic, self.channel,
                    message.id.decode(), message.attempts)
        if self._on_give_up is not None:
            try:
                outcome = self._on_give_up(message)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:
                log.error("[%s/%s] give-up hook raised %r for msg %s", self.topic, self.channel, exc,
                          message.id.decode())
        message.finish()

    async def _stop_deadline(self) -> None:
        await anyio.sleep(self._stop_timeout)
        log.warning("[%s/%s] stop timeout: requeueing what is still in flight", self.topic, self.channel)
        self._workers_scope.cancel()
        for message in self._queue:
            message.requeue(0, backoff=False)
        self._queue.clear()
        for conn in self._conns.values():
            conn.close_when_flushed()
        await anyio.sleep(FORCED_CLOSE_GRACE)
        for conn in list(self._conns.values()):
            conn.close()
        self._stopped.set()

    # -- RDY and backoff (rdy.py, backoff.py) ----------------------------------------------

    def _per_connection(self) -> int:
        return rdy.per_connection(self._max_in_flight, len(self._conns))

    def _maybe_update_rdy(self, conn: Connection) -> None:
        if self._backoff.in_backoff or self._backoff.in_timeout:
            return
        self._update_rdy(conn, self._per_connection())

    def _update_rdy(self, conn: Connection, count: int) -> bool:
        if conn.closing or conn.closed:
            return False
        count = min(count, conn.max_rdy)
        self._cancel_rdy_retry(conn)
        fitted = rdy.within_max_in_flight(count, conn.rdy, self._max_in_flight, self._total_rdy)
        if fitted is None:
            if conn.rdy == 0:
                self._schedule_rdy_retry(conn, count)
            return False
        self._send_rdy(conn, fitted)
        return True

    def _send_rdy(self, conn: Connection, count: int) -> None:
        if count == 0 and conn.rdy == 0:
            return
        self._total_rdy += count - conn.rdy
        previous, conn.rdy = conn.rdy, count
        if count > 0:
            conn.last_rdy_time = anyio.current_time()
        if count != previous:
            conn.send_rdy(count)

    def _schedule_rdy_retry(self, conn: Connection, count: int) -> None:
        scope = anyio.CancelScope()
        self._rdy_retries[conn] = scope

        async def retry():
            with scope:
                await anyio.sleep(rdy.RDY_RETRY_DELAY)
                self._rdy_retries.pop(conn, None)
                self._update_rdy(conn, count)

        self._task_group.start_soon(retry)

    def _cancel_rdy_retry(self, conn: Connection) -> bool:
        scope = self._rdy_retries.pop(conn, None)
        if scope is None:
            return False
        scope.cancel()
        return True

    async def _rdy_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.rdy_redistribute_interval)
            self._redistribute_rdy()

    def _redistribute_rdy(self) -> None:
        if self._backoff.in_timeout or not self._conns:
            return
        conns = list(self._conns.values())
        if rdy.needs_redistribution(len(conns), self._max_in_flight, self._backoff.in_backoff):
            self._need_redistribution = True
        if not self._need_redistribution:
            return
        self._need_redistribution = False
        views = [rdy.RdyView(conn, conn.rdy, conn.last_message_time, conn.last_rdy_time) for conn in conns]
        for conn in rdy.idle_connections(views, anyio.current_time(), self.config.low_rdy_idle_timeout,
                                         self.config.low_rdy_timeout):
            log.debug("(%s) idle connection, giving up RDY", conn.address)
            self._update_rdy(conn, 0)
        available = rdy.available_max_in_flight(self._max_in_flight, self._total_rdy, self._backoff.in_backoff)
        for conn in rdy.pick_connections(conns, available, self._rng):
            log.debug("(%s) redistributing RDY", conn.address)
            self._update_rdy(conn, 1)

    def _start_closing(self, conn: Connection) -> None:
        conn.closing = conn.answers_watched = True
        conn.send(CLS)

    def _signal(self, signal: Signal) -> None:
        decision = self._backoff.update(signal)
        for conn in self._conns.values():
            conn.answers_watched = conn.closing or self._backoff.in_backoff
        if decision is None:
            return
        if decision == EXIT:
            count = self._per_connection()
            log.warning("[%s/%s] exiting backoff, returning all to RDY %d", self.topic, self.channel, count)
            for conn in list(self._conns.values()):
                self._update_rdy(conn, count)
            return
        log.warning("[%s/%s] backing off for %.3fs (backoff level %d), setting all to RDY 0",
                    self.topic, self.channel, decision, self._backoff.level)
        for conn in list(self._conns.values()):
            self._update_rdy(conn, 0)
        self._start_backoff_timeout(decision)

    def _start_backoff_timeout(self, seconds: float) -> None:
        self._backoff.in_timeout = seconds > 0
        self._task_group.start_soon(self._resume_after, seconds)

    async def _resume_after(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        if self._stopping:
            self._backoff.in_timeout = False
            return
        conns = list(self._conns.values())
        if not conns:
            log.warning("[%s/%s] no connection available to resume, backing off for 1s", self.topic, self.channel)
            self._start_backoff_timeout(1.0)
            return
        choice = self._rng.choice(conns)
        log.warning("[%s/%s] (%s) backoff timeout expired, sending RDY 1", self.topic, self.channel, choice.address)
        if not self._update_rdy(choice, 1):
            self._start_backoff_timeout(1.0)
            return
        self._backoff.in_timeout = False
