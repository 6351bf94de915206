"""A mixed load against an nsqd that is killed with -9 at random moments and restarted on the
same data directory, and a model that checks from outside, after every restart, what the
README's Guarantees promise (tests/test_nsqd_crash_points.py; bench/bench_crash_points.py runs
it for longer).

The load, in each life of nsqd: three producers (PUB, MPUB of 2-20, DPUB of 50 ms-1.5 s) on
``orders`` (channels ``a`` and ``b``) and on a ``late.N`` topic, which gets its channel ``c``
only in the third of the four lives it is published in (so messages wait in the topic's own
disk queue, and deferred ones in the topic, before they are handed on); consumers that FIN,
REQ (at once or with a delay), TOUCH and FIN later, hold and FIN later, and one with a 1 s
msg_timeout that lets some messages time out. nsqd is killed after a random time (a fifth of
the lives end within 150 ms of the start), and, when NSQ v1.3.0's nsqd is at hand, a copy of
the directory the kill left is opened with it.

Knowing what nsqd did, from outside. A FIN or REQ has no answer, so each is followed by a
command that must fail if it took effect: ``FIN id`` by ``REQ id 0`` and ``REQ id <delay>``
by ``TOUCH id``, whose errors (E_REQ_FAILED, E_TOUCH_FAILED) confirm it, while its own error
(E_FIN_FAILED, E_REQ_FAILED: the message timed out first) refuses it. Commands sent before a
kill and never confirmed are "unknown": nsqd may or may not have run them. A consumer that
gets a message again after FINishing it (a duplicate the README allows) FINs it at once.

What is checked (``Model.violations``), with the README's words:
* both modes: every delivered message was published, under one ID for all its life; nsqd
  starts again on the directory each time, and NSQ v1.3.0's nsqd opens it (every topic and
  channel of nsqd.dat listed, exit 0 on SIGTERM);
* ``--mem-queue-size=0 --sync-every=1 --persist-deferred`` ("a kill -9 loses no acknowledged
  message", "each message is delivered when due, not before", "What may come twice: messages
  finished since the last tidying"): every acknowledged message is FINished in the end; no
  delivery comes before its DPUB's delay or its confirmed REQ's delay has passed; after its
  FIN a message comes back at most once in each later life of nsqd, and in the life it was
  published in never; attempts never go down;
* default flags ("Lost, as in NSQ: messages held in memory ... Kept: everything in a disk
  queue"): every acknowledged message that went to a disk queue is FINished in the end. To
  know which did, one producer MPUBs 1,000 at a time to ``backlog``, whose channel nobody
  reads until the end: in each life the first 10,000 (--mem-queue-size) of them stay in
  memory, every later one went to disk.
"""

import json
import math
import os
import random
import shutil
import signal
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import httpx
import trio

from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE
from common.message import decode_message

from .datadir import Server, dpub, mpub, pub
from .go_nsq import GoNsqdProcess, missing_reason
from .helpers import RawClient
from .waiting import await_until

STRICT_FLAGS = ("--mem-queue-size=0", "--sync-every=1", "--persist-deferred")
SYNC_TIMEOUTS = ("100ms", "300ms", "2s")  # one is drawn for each life: how often nsqd syncs and tidies
ORDERS = "orders"
BACKLOG = "backlog"  # default flags: MPUBs whose place in memory or on disk is known
MEM_QUEUE_SIZE = 10_000
BACKLOG_PER_LIFE = 12_000
LIVES_PER_LATE_TOPIC = 4
DUE_SLACK = 0.01  # s: float rounding between nsqd's clocks and ours
DISCONNECTED = (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError)
ID_NOBODY_HAS = b"0" * 16


@dataclass
class Command:
    """A FIN or a REQ with a delay, as a consumer sent it; ``outcome`` as far as it is known."""

    kind: str
    sent_at: float
    life: int
    delay: float = 0.0
    outcome: str = "unknown"  # "ok" (confirmed), "refused" (its own error came back)


@dataclass
class Delivery:
    at: float
    life: int
    msg_id: bytes
    attempts: int


@dataclass
class Copy:
    """One channel's copy of one message: what nsqd did with it, in the order it happened."""

    events: list = field(default_factory=list)  # Delivery and Command, in time order
    fins: list = field(default_factory=list)

    def finished(self) -> bool:
        return any(fin.outcome != "refused" for fin in self.fins)


class Model:
    def __init__(self, strict: bool):
        self.strict = strict
        self.life = 0
        self.published: dict[bytes, tuple[str, float, float]] = {}  # body -> (topic, sent at, delay)
        self.published_life: dict[bytes, int] = {}
        self.acked: set[bytes] = set()
        self.kept_on_disk: set[bytes] = set()  # default flags: acknowledged and written to a disk queue
        self.ids: dict[bytes, bytes] = {}
        self.copies: dict[tuple[str, str, bytes], Copy] = defaultdict(Copy)
        self.channels: dict[str, tuple[str, ...]] = {ORDERS: ("a", "b")} if strict else {ORDERS: ("a", "b"),
                                                                                          BACKLOG: ("c",)}
        self.problems: list[str] = []  # seen as they happen (unknown bodies, failed restarts, Go)
        self.deliveries = 0
        self._body_numbers = 0

    # -- what the load does --------------------------------------------------------------------

    def new_bodies(self, prefix: str, count: int) -> list[bytes]:
        start, self._body_numbers = self._body_numbers, self._body_numbers + count
        return [b"%s-%d" % (prefix.encode(), n) for n in range(start, start + count)]

    def late_topic(self) -> tuple[str, bool]:
        """This life's late topic, and whether its channel exists yet."""
        number, age = divmod(self.life - 1, LIVES_PER_LATE_TOPIC)
        topic = f"late.{number}"
        self.channels.setdefault(topic, ("c",))
        return topic, age >= 2

    def publishing(self, topic: str, bodies: list[bytes], delay: float) -> None:
        now = time.time()
        for body in bodies:
            self.published[body] = (topic, now, delay)
            self.published_life[body] = self.life

    def delivered(self, topic: str, channel: str, raw: bytes) -> None:
        message = decode_message(raw)
        if message.body not in self.published:
            self.problems.append(f"life {self.life}: {topic}/{channel} delivered {message.body[:40]!r}, never published")
            return
        self.deliveries += 1
        self.copies[(topic, channel, message.body)].events.append(
            Delivery(time.time(), self.life, message.id, message.attempts))

    def command(self, kind: str, topic: str, channel: str, body: bytes, delay: float = 0.0) -> Command:
        command = Command(kind, time.time(), self.life, delay)
        copy = self.copies[(topic, channel, body)]
        copy.events.append(command)
        if kind == "FIN":
            copy.fins.append(command)
        return command

    def finished(self, topic: str, channel: str, body: bytes) -> bool:
        copy = self.copies.get((topic, channel, body))
        return copy is not None and copy.finished()

    def outstanding(self) -> int:
        """Acknowledged copies not FINished yet (what the last drain waits for)."""
        return sum(1 for key in self.expected() if not self.copies[key].finished())

    def expected(self) -> list[tuple[str, str, bytes]]:
        """Every channel's copy of every message that must be delivered."""
        must = self.acked if self.strict else self.kept_on_disk
        return [(topic, channel, body) for body in must for topic in [self.published[body][0]]
                for channel in self.channels[topic]]

    # -- the checks ------------------------------------------------------------------------------

    def violations(self, final: bool = False) -> list[str]:
        found = list(self.problems)
        for body, (msg_id, first) in self._ids().items():
            if len(msg_id) > 1:
                found.append(f"{body!r} delivered under IDs {sorted(msg_id)} (first in life {first})")
        for key, copy in self.copies.items():
            found += [f"{key[0]}/{key[1]} {key[2]!r}: {text}" for text in self._copy_violations(key, copy)]
        if final:
            lost = [key for key in self.expected() if not self.copies[key].finished()]
            found += [f"{topic}/{channel} {body!r}: acknowledged, never FINished (lost)"
                      for topic, channel, body in lost[:20]]
            if len(lost) > 20:
                found.append(f"... {len(lost)} acknowledged copies lost in all")
        return found

    def _ids(self) -> dict[bytes, tuple[set, int]]:
        seen: dict[bytes, tuple[set, int]] = {}
        for (_, _, body), copy in self.copies.items():
            for event in copy.events:
                if isinstance(event, Delivery):
                    ids, first = seen.setdefault(body, (set(), event.life))
                    ids.add(event.msg_id)
        return seen

    def _copy_violations(self, key, copy: Copy) -> list[str]:
        found = []
        _, sent_at, dpub_delay = self.published[key[2]]
        not_before = sent_at + dpub_delay  # a DPUB's delay
        last_attempts = 0
        fin: Command | None = None  # the first FIN that was not refused
        after_fin: dict[int, int] = defaultdict(int)  # life -> deliveries after it, less refused FINs
        for event in copy.events:
            if isinstance(event, Command):
                if event.kind == "REQ" and event.outcome == "ok":
                    not_before = max(not_before, event.sent_at + event.delay)
                if event.kind == "FIN":
                    if fin is None and event.outcome != "refused":
                        fin = event
                    elif fin is not None and event.outcome == "refused":
                        after_fin[event.life] -= 1  # a duplicate's FIN came too late: it may come again
                continue
            if not self.strict:
                continue
            if fin is not None:
                after_fin[event.life] += 1
            if event.at < not_before - DUE_SLACK:
                found.append(f"delivered {not_before - event.at:.3f} s before its due time (life {event.life}, "
                             f"attempts {event.attempts}; {trail(copy)})")
            if event.attempts < last_attempts:
                found.append(f"attempts went down from {last_attempts} to {event.attempts} (life {event.life}; "
                             f"{trail(copy)})")
            last_attempts = max(last_attempts, event.attempts)
            not_before = 0.0  # a due time holds for the next delivery only
        if self.strict and fin is not None:
            born = self.published_life[key[2]]
            for life, count in after_fin.items():
                allowed = 0 if life == born else 1  # a kill -9 may bring it back once
                if count > allowed and not (life == fin.life and fin.outcome == "unknown"):
                    found.append(f"delivered {count} times in life {life} after its FIN in life {fin.life} "
                                 f"(published in life {born}; {trail(copy)})")
        return found


def trail(copy: Copy) -> str:
    """What happened to a copy, life by life: deliveries (ID, attempts) and commands (outcome),
    each at its time in seconds since the copy's first event."""
    steps, life = [], None
    first = copy.events[0].at if isinstance(copy.events[0], Delivery) else copy.events[0].sent_at
    for event in copy.events:
        if event.life != life:
            life = event.life
            steps.append(f"life {life}:")
        if isinstance(event, Delivery):
            steps.append(f"+{event.at - first:.3f} delivered {event.msg_id.decode(errors='replace')} "
                         f"attempts {event.attempts}")
        else:
            delay = f" {event.delay:g} s" if event.kind == "REQ" else ""
            steps.append(f"+{event.sent_at - first:.3f} {event.kind}{delay} {event.outcome}")
    return " ".join(steps)


# -- the load ------------------------------------------------------------------------------------

async def producer(port: int, model: Model, rng: random.Random, kind: str) -> None:
    try:
        client = await RawClient.connect(port)
        while True:
            topic = ORDERS if rng.random() < 0.7 else model.late_topic()[0]
            if kind == "PUB":
                bodies, delay = model.new_bodies("pub", 1), 0.0
                command = pub(topic, bodies[0])
            elif kind == "MPUB":
                bodies, delay = model.new_bodies("mpub", rng.randint(2, 20)), 0.0
                command = mpub(topic, bodies)
            else:
                bodies, delay = model.new_bodies("dpub", 1), rng.randint(50, 1500) / 1000
                command = dpub(topic, round(delay * 1000), bodies[0])
            model.publishing(topic, bodies, delay)
            await client.send(command)
            frame = await client.read_frame(timeout=30)
            if frame.frame_type != FRAME_TYPE_ERROR and frame.data == b"OK":
                model.acked.update(bodies)
    except DISCONNECTED:
        return


async def backlog_producer(port: int, model: Model) -> None:
    """Default flags: MPUBs of 1,000 to a channel nobody reads; past the first 10,000 of this
    life (memory) each one was written to the disk queue before its OK."""
    stored = 0
    try:
        client = await RawClient.connect(port)
        while stored < BACKLOG_PER_LIFE:
            bodies = model.new_bodies("backlog", 1000)
            model.publishing(BACKLOG, bodies, 0.0)
            await client.send(mpub(BACKLOG, bodies))
            if await client.read_response() == b"OK":
                model.acked.update(bodies)
                model.kept_on_disk.update(bodies[max(0, MEM_QUEUE_SIZE - stored):])
                stored += len(bodies)
    except DISCONNECTED:
        return


# Consumers' ways with a message: (name, weight). The one with a 1 s msg_timeout also lets
# messages time out; the others (msg_timeout 60 s) REQ some at once.
PATIENT = (("fin", 50), ("req0", 10), ("req_later", 15), ("touch_fin", 10), ("hold_fin", 15))
HASTY = (("fin", 45), ("timeout", 25), ("touch_fin", 15), ("req_later", 15))
DRAIN = (("fin", 1),)


class Consumer:
    def __init__(self, port: int, model: Model, rng: random.Random, topic: str, channel: str, ways,
                 msg_timeout_ms: int = 0):
        self.port, self.model, self.rng = port, model, rng
        self.topic, self.channel = topic, channel
        self.ways = ways
        self.msg_timeout_ms = msg_timeout_ms
        self.client: RawClient | None = None
        # commands go out from a task of their own, as NSQ's clients send: reading never waits
        # for a write (nsqd stops reading a client that leaves 1 MiB of its output unread)
        self.outbox_in, self.outbox = trio.open_memory_channel(math.inf)
        self.pending: dict[bytes, deque] = defaultdict(deque)  # ID -> commands waiting for their proof

    async def run(self, rdy: int) -> None:
        try:
            self.client = await RawClient.connect(self.port)
            if self.msg_timeout_ms:
                await self.client.identify(msg_timeout=self.msg_timeout_ms)
            await self.client.sub(self.topic, self.channel, rdy=rdy)
        except DISCONNECTED:
            return
        async with trio.open_nursery() as later:
            later.start_soon(self._write)
            try:
                while True:
                    frame = await self.client.read_frame(timeout=3600)
                    if frame.frame_type == FRAME_TYPE_MESSAGE:
                        self.model.delivered(self.topic, self.channel, frame.data)
                        self._handle(frame.data, later)
                    elif frame.frame_type == FRAME_TYPE_ERROR:
                        self._settle(frame.data)
            except DISCONNECTED:
                later.cancel_scope.cancel()

    def _handle(self, raw: bytes, later: trio.Nursery) -> None:
        msg_id, body = raw[10:26], raw[26:]
        if self.model.finished(self.topic, self.channel, body):
            way = "fin"
        else:
            way = self.rng.choices([w for w, _ in self.ways], [weight for _, weight in self.ways])[0]
        if way == "fin":
            self._fin(msg_id, body)
        elif way == "req0":
            self._send(b"REQ %s 0\n" % msg_id)
        elif way == "req_later":
            delay_ms = self.rng.randint(50, 1500)
            self._expect(msg_id, self.model.command("REQ", self.topic, self.channel, body, delay_ms / 1000))
            self._send(b"REQ %s %d\nTOUCH %s\n" % (msg_id, delay_ms, msg_id))
        elif way == "touch_fin":
            later.start_soon(self._touch_then_fin, msg_id, body)
        elif way == "hold_fin":
            later.start_soon(self._hold_then_fin, msg_id, body)
        # "timeout": left to time out

    def _fin(self, msg_id: bytes, body: bytes) -> None:
        self._expect(msg_id, self.model.command("FIN", self.topic, self.channel, body))
        self._send(b"FIN %s\nREQ %s 0\n" % (msg_id, msg_id))

    async def _touch_then_fin(self, msg_id: bytes, body: bytes) -> None:
        await trio.sleep(self.rng.uniform(0.1, 0.6))  # deliberate (as the two below): a consumer's work
        self._send(b"TOUCH %s\n" % msg_id)
        await trio.sleep(self.rng.uniform(0.1, 0.6))
        self._fin(msg_id, body)

    async def _hold_then_fin(self, msg_id: bytes, body: bytes) -> None:
        await trio.sleep(self.rng.uniform(0.05, 0.5))
        self._fin(msg_id, body)

    def _expect(self, msg_id: bytes, command: Command) -> None:
        self.pending[msg_id].append(command)

    def _send(self, data: bytes) -> None:
        self.outbox_in.send_nowait(data)

    async def _write(self) -> None:
        try:
            async for data in self.outbox:
                await self.client.send(data)
        except DISCONNECTED:
            return

    def _settle(self, error: bytes) -> None:
        """An error frame: a FIN or REQ refused (its own error), or confirmed (its proof's)."""
        code, _, msg_id = (error.split(b" ") + [b"", b""])[:3]
        waiting = self.pending.get(msg_id)
        if not waiting:
            return
        command = waiting[0]
        own, proof = (b"E_FIN_FAILED", b"E_REQ_FAILED") if command.kind == "FIN" else (b"E_REQ_FAILED",
                                                                                      b"E_TOUCH_FAILED")
        if code == own and command.outcome == "unknown":
            command.outcome = "refused"
        elif code == proof:
            if command.outcome == "unknown":
                command.outcome = "ok"
            waiting.popleft()
            if not waiting:
                del self.pending[msg_id]


# -- one life of nsqd, and the checks around it --------------------------------------------------------

@dataclass
class Run:
    """A run of the loop: its data directory, flags, randomness and what it found."""

    data_path: str
    strict: bool
    seed: int
    go_checks: int = 0
    go_skipped: str | None = field(default_factory=missing_reason)
    lives: int = 0
    logs: list = field(default_factory=list)  # each life's nsqd log
    server: Server | None = None  # the nsqd of the current life

    def __post_init__(self):
        self.model = Model(self.strict)
        self.rng = random.Random(self.seed)

    def flags(self) -> tuple[str, ...]:
        sync_timeout = f"--sync-timeout={self.rng.choice(SYNC_TIMEOUTS)}"
        return (*STRICT_FLAGS, sync_timeout) if self.strict else (sync_timeout,)

    def start(self, *flags: str) -> Server | None:
        try:
            self.server = Server(self.data_path, *flags)
            return self.server
        except RuntimeError as exc:
            self.model.problems.append(f"life {self.model.life}: nsqd did not start on the directory: {exc}")
            return None

    async def life(self, go_nursery: trio.Nursery) -> bool:
        """Start nsqd, load it, kill it at a random moment; False if it did not start."""
        model, rng = self.model, self.rng
        model.life += 1
        self.lives += 1
        server = self.start(*self.flags())
        if server is None:
            return False
        port = server.tcp_port
        if model.life == 1:  # a channel gets what is published after it exists: these exist first
            for topic, channels in model.channels.items():
                for channel in channels:
                    await create_channel(server, topic, channel)
        late_topic, late_has_channel = model.late_topic()
        end_after = rng.uniform(0.0, 0.15) if rng.random() < 0.2 else rng.uniform(0.15, 1.2)
        async with trio.open_nursery() as load:
            for topic, channel in ((ORDERS, "a"), (ORDERS, "b")) + (((late_topic, "c"),) if late_has_channel else ()):
                load.start_soon(Consumer(port, model, rng, topic, channel, PATIENT).run, rng.randint(1, 50))
            load.start_soon(Consumer(port, model, rng, ORDERS, "a", HASTY, msg_timeout_ms=1000).run, rng.randint(1, 20))
            for kind in ("PUB", "MPUB", "DPUB"):
                load.start_soon(producer, port, model, rng, kind)
            if not self.strict:
                load.start_soon(backlog_producer, port, model)
            await trio.sleep(end_after)  # deliberate: the kill comes at a random point of the load
            server.kill()
            with trio.move_on_after(5):  # the load reads what nsqd sent before it died, then stops
                while load.child_tasks:
                    await trio.sleep(0.01)  # (a bounded poll: what is left is cancelled)
            load.cancel_scope.cancel()
        self.logs.append(server.log())
        if self.go_skipped is None:
            copy = f"{self.data_path}.go{model.life}"
            shutil.copytree(self.data_path, copy)
            go_nursery.start_soon(self._go_opens, copy, model.life)
        return True

    async def _go_opens(self, copy: str, life: int) -> None:
        problems = await trio.to_thread.run_sync(go_opens, copy)
        self.model.problems += [f"life {life}: NSQ v1.3.0's nsqd on the directory: {p}" for p in problems]
        self.go_checks += 1
        shutil.rmtree(copy, ignore_errors=True)

    async def drain(self, stall: float = 30) -> None:
        """Start nsqd once more and FIN everything, until every acknowledged copy is done and
        nsqd holds nothing (a failure once ``stall`` seconds pass without a delivery); then stop
        it gracefully."""
        model = self.model
        model.life += 1
        server = self.start(*(STRICT_FLAGS if self.strict else ()))
        if server is None:
            return
        async with trio.open_nursery() as load:
            for topic, channels in list(model.channels.items()):
                for channel in channels:
                    load.start_soon(Consumer(server.tcp_port, model, self.rng, topic, channel, DRAIN).run, 500)
            delivered, progress_at = model.deliveries, time.monotonic()
            while model.outstanding() or await what_is_held(server):
                if time.monotonic() - progress_at > stall:
                    model.problems.append(f"the last life stopped draining for {stall} s: {model.outstanding()} "
                                          f"acknowledged copies not FINished; nsqd holds {await what_is_held(server)}")
                    break
                await trio.sleep(0.5)  # a poll: the stall is measured in deliveries
                if model.deliveries > delivered:
                    delivered, progress_at = model.deliveries, time.monotonic()
            load.cancel_scope.cancel()
        code = server.stop()
        self.logs.append(server.log())
        if code != 0:
            model.problems.append(f"nsqd exited {code} at the last graceful stop")


async def create_channel(server: Server, topic: str, channel: str) -> None:
    """Create a channel and wait until nsqd.dat lists it (a kill -9 before that may forget it)."""
    async with httpx.AsyncClient() as http:
        for path, params in (("topic", {"topic": topic}), ("channel", {"topic": topic, "channel": channel})):
            response = await http.post(f"{server.http}/{path}/create", params=params)
            assert response.status_code == 200, response.text
    dat = os.path.join(server.data_path, "nsqd.dat")
    await await_until(lambda: channel in [c["name"] for t in read_json(dat).get("topics") or [] if t["name"] == topic
                                          for c in t.get("channels") or []], what=f"{channel} in nsqd.dat")


def read_json(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except FileNotFoundError:
        return {}


async def what_is_held(server: Server) -> list[str]:
    """What nsqd's /stats says it still holds: topics and channels with messages."""
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{server.http}/stats", params={"format": "json"})).json()
    if "topics" not in stats:
        return [f"/stats answered {stats}"]
    held = []
    for topic in stats["topics"]:
        if topic["depth"]:
            held.append(f"{topic['topic_name']}: depth {topic['depth']}")
        held += [f"{topic['topic_name']}/{channel['channel_name']}: depth {channel['depth']}, in flight "
                 f"{channel['in_flight_count']}, deferred {channel['deferred_count']}" for channel in topic["channels"]
                 if channel["depth"] or channel["in_flight_count"] or channel["deferred_count"]]
    return held


def go_opens(data_path: str) -> list[str]:
    """NSQ v1.3.0's nsqd on a copy of the directory: it starts, lists every topic and channel
    of nsqd.dat, and stops cleanly. What went wrong, if anything."""
    saved = {topic["name"]: {c["name"] for c in topic.get("channels") or []}
             for topic in read_json(os.path.join(data_path, "nsqd.dat")).get("topics") or []}
    try:
        go = GoNsqdProcess(f"--data-path={data_path}")
    except RuntimeError as exc:
        return [f"did not start: {exc}"]
    try:
        stats = httpx.get(f"http://127.0.0.1:{go.http_port}/stats", params={"format": "json"}, timeout=10).json()
        listed = {topic["topic_name"]: {c["channel_name"] for c in topic["channels"]} for topic in stats["topics"]}
    finally:
        code = go.stop(signal.SIGTERM)
    problems = [f"topic {name} or some of its channels {sorted(channels)} missing from /stats"
                for name, channels in saved.items() if not channels <= listed.get(name, set())]
    if code != 0:
        problems.append(f"exited {code} on SIGTERM:\n{go.log()[-2000:]}")
    return problems


async def crash_loop(data_path: str, strict: bool, lives: int, seed: int) -> Run:
    os.makedirs(data_path, exist_ok=True)
    run = Run(str(data_path), strict, seed)
    try:
        async with trio.open_nursery() as go_nursery:
            for _ in range(lives):
                if not await run.life(go_nursery):
                    break
            await run.drain()
    finally:
        if run.server is not None and run.server.proc.poll() is None:  # the loop failed half-way
            run.server.proc.kill()
            run.server.proc.wait()
    return run


def summary(run: Run, seconds: float) -> str:
    model = run.model
    go = f"{run.go_checks} opened by NSQ v1.3.0's nsqd" if run.go_skipped is None else f"Go check skipped: {run.go_skipped}"
    return (f"{run.lives} kill -9 points ({'strict' if run.strict else 'default'} flags, seed {run.seed}) in "
            f"{seconds:.0f} s: {len(model.published)} messages published, {len(model.acked)} acknowledged, "
            f"{model.deliveries} deliveries" + ("" if run.strict else f", {len(model.kept_on_disk)} known to be on disk")
            + f"; {go}")

