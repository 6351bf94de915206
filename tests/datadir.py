"""Helpers for tests of nsqd's data directory: go-diskqueue v1.1.0 files written and parsed
independently of nsqd/diskqueue.py, and real nsqd processes stopped and restarted on one
--data-path.

go-diskqueue format (go-diskqueue v1.1.0's diskqueue.go): ``NAME.diskqueue.%06d.dat`` holds records
``[int32 BE length][payload]``; ``NAME.diskqueue.meta.dat`` is
``"depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n"``. A payload is a message in
NSQ's encoding: ``[timestamp int64 ns][attempts uint16][16-byte hex id][body]``.
"""

import json
import os
import re
import signal
import struct
import time
from collections import Counter

import httpx
import pytest
import trio

from common.frames import FRAME_TYPE_ERROR
from common.message import HEADER_LENGTH, Message, decode_message

from .go_nsq import GoDaemon, GoNsqdProcess, stop_gracefully
from .helpers import NsqdProcess, RawClient
from .waiting import await_until as wait_until  # noqa: F401 (the name the data-directory tests import)

LENGTH = struct.Struct(">i")
META_RE = re.compile(r"(\d+)\n(\d+),(\d+)\n(\d+),(\d+)\n")
ID_RE = re.compile(rb"[0-9a-f]{16}")


# -- the go-diskqueue format, by hand ------------------------------------------------------

def record(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


def payload(body: bytes, msg_id: bytes, timestamp: int = 1_700_000_000_000_000_000, attempts: int = 0) -> bytes:
    return struct.pack(">qH", timestamp, attempts) + msg_id + body


def meta_text(depth: int, read: tuple[int, int], write: tuple[int, int]) -> str:
    return f"{depth}\n{read[0]},{read[1]}\n{write[0]},{write[1]}\n"


def data_file(data_path, queue: str, number: int) -> str:
    return os.path.join(data_path, f"{queue}.diskqueue.{number:06d}.dat")


def meta_file(data_path, queue: str) -> str:
    return os.path.join(data_path, f"{queue}.diskqueue.meta.dat")


def parse_records(data: bytes) -> list[bytes]:
    """Every record of a data file; the file must end exactly after the last one."""
    records, pos = [], 0
    while pos < len(data):
        assert pos + 4 <= len(data), f"truncated length prefix at {pos}"
        (size,) = LENGTH.unpack_from(data, pos)
        assert size >= HEADER_LENGTH, f"record at {pos} too short ({size})"
        assert pos + 4 + size <= len(data), f"truncated record at {pos}"
        records.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return records


def parse_meta(path) -> tuple[int, tuple[int, int], tuple[int, int]]:
    with open(path) as handle:
        text = handle.read()
    match = META_RE.fullmatch(text)
    assert match, f"meta file {path} not in go-diskqueue's format: {text!r}"
    depth, rnum, rpos, wnum, wpos = map(int, match.groups())
    return depth, (rnum, rpos), (wnum, wpos)


def queued_messages(data_path, queue: str) -> list[Message]:
    """The messages a go-diskqueue would read from ``queue``, checked against its meta file:
    depth, positions on record boundaries, every file in between present."""
    depth, (rnum, rpos), (wnum, wpos) = parse_meta(meta_file(data_path, queue))
    messages = []
    for number in range(rnum, wnum + 1):
        path = data_file(data_path, queue, number)
        if number == wnum and wpos == 0 and not os.path.exists(path):
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        if number == wnum:
            assert len(data) == wpos, f"{path}: size {len(data)} != writePos {wpos}"
        start = rpos if number == rnum else 0
        messages += [decode_message(p) for p in parse_records(data[start:])]
    assert len(messages) == depth, f"{queue}: depth {depth} but {len(messages)} records"
    return messages


def queue_files(data_path, queue: str) -> list[str]:
    """Names of the queue's data files, sorted."""
    pattern = re.compile(re.escape(queue) + r"\.diskqueue\.\d{6}\.dat")
    return sorted(name for name in os.listdir(data_path) if pattern.fullmatch(name))


def nsqd_dat(data_path) -> bytes:
    with open(os.path.join(data_path, "nsqd.dat"), "rb") as handle:
        return handle.read()


def go_encoding(topics: list[tuple[str, bool, list[tuple[str, bool]]]]) -> bytes:
    """What NSQ v1.3 writes for these (name, paused, channels) topics."""
    def channel(name: str, paused: bool) -> str:
        return f'{{"name":"{name}","paused":{json.dumps(paused)}}}'

    def topic(name: str, paused: bool, channels: list) -> str:
        listed = "[" + ",".join(channel(*c) for c in channels) + "]" if channels else "null"
        return f'{{"name":"{name}","paused":{json.dumps(paused)},"channels":{listed}}}'

    listed = "[" + ",".join(topic(*t) for t in topics) + "]" if topics else "null"
    return f'{{"topics":{listed},"version":"1.3.0"}}'.encode()


# Go's metadata fields (nsqd/nsqd.go): encoding/json matches keys to them case-insensitively
# and ignores every other key.
GO_TOPIC_FIELDS = {"name": str, "paused": bool, "channels": list}
GO_CHANNEL_FIELDS = {"name": str, "paused": bool}


def _go_struct(entry: dict, fields: dict) -> dict:
    """What Go's json.Unmarshal puts into a struct with ``fields``; AssertionError where Go would
    fail (a known key of the wrong type)."""
    assert isinstance(entry, dict), entry
    seen = {}
    for key, value in entry.items():
        field = key.lower()
        if field in fields:
            assert value is None or isinstance(value, fields[field]), f"Go cannot read {key}={value!r}"
            seen[field] = value
    return seen


def go_metadata(data: bytes) -> list[tuple[str, bool, list[tuple[str, bool]]]]:
    """nsqd.dat as NSQ v1.3's nsqd reads it: (name, paused, [(channel, paused)]) per topic."""
    document = _go_struct(json.loads(data), {"topics": list, "version": str})
    topics = []
    for entry in document.get("topics") or []:
        topic = _go_struct(entry, GO_TOPIC_FIELDS)
        channels = [_go_struct(channel, GO_CHANNEL_FIELDS) for channel in topic.get("channels") or []]
        topics.append((topic.get("name", ""), bool(topic.get("paused")),
                       [(channel.get("name", ""), bool(channel.get("paused"))) for channel in channels]))
    return topics


def check_message(msg: Message, not_before_ns: int) -> None:
    assert ID_RE.fullmatch(msg.id), msg.id
    assert not_before_ns <= msg.timestamp <= time.time_ns()


# -- real nsqd processes -------------------------------------------------------------------

_started: list[NsqdProcess] = []


@pytest.fixture(autouse=True)
def kill_leftover_servers():
    """A test that fails half-way leaves no nsqd behind (import this into the test module)."""
    yield
    while _started:
        server = _started.pop()
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


class Server(NsqdProcess):
    """A real nsqd on --data-path, with its HTTP port (read from its log): this project's, or
    NSQ's with ``GoServer``."""

    def __init__(self, data_path, *flags: str):
        self.data_path = str(data_path)
        super().__init__(f"--data-path={data_path}", *flags)
        _started.append(self)
        self.http = f"http://127.0.0.1:{self.http_port}"

    def signal(self, signum: int) -> int:
        """Send ``signum``; the exit code (negative: killed by a signal)."""
        self.proc.send_signal(signum)
        code = self.proc.wait(timeout=15)
        self._log_reader.join(timeout=5)
        return code

    def kill(self) -> None:
        assert self.signal(signal.SIGKILL) == -signal.SIGKILL


class GoServer(GoDaemon, Server):
    """NSQ v1.3.0's nsqd on --data-path (tests/go_nsq.py finds it); SIGTERM is sent as SIGINT until
    it is handled (tests/go_nsq.py: go_daemon)."""

    command = GoNsqdProcess.command

    def signal(self, signum: int) -> int:
        if signum == signal.SIGTERM:
            stop_gracefully(self.proc)
        return super().signal(signum)


def restart(server: Server, *flags: str, signum: int = signal.SIGTERM) -> Server:
    """Stop gracefully (exit 0 expected) and start the same program again on the same data directory."""
    code = server.signal(signum)
    assert code == 0, f"exit code {code}:\n{server.log()}"
    return type(server)(server.data_path, *flags)


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def mpub(topic: str, messages: list[bytes]) -> bytes:
    parts = [LENGTH.pack(len(messages))] + [record(body) for body in messages]
    body = b"".join(parts)
    return f"MPUB {topic}\n".encode() + LENGTH.pack(len(body)) + body


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + LENGTH.pack(len(body)) + body


def dpub(topic: str, delay_ms: int, body: bytes) -> bytes:
    return f"DPUB {topic} {delay_ms}\n".encode() + LENGTH.pack(len(body)) + body


async def publish(port: int, topic: str, messages: list[bytes]) -> None:
    """PUB each message and wait for every OK."""
    client = await RawClient.connect(port)
    await client.send(b"".join(pub(topic, body) for body in messages))
    for _ in messages:
        assert await client.read_response() == b"OK"
    await client.close()


async def subscribe(port: int, topic: str, channel: str, rdy: int = 0) -> RawClient:
    client = await RawClient.connect(port)
    await client.sub(topic, channel, rdy=rdy)
    return client


async def create_channel(port: int, topic: str, channel: str) -> None:
    """SUB then leave: the (non-ephemeral) channel stays, without consumers."""
    client = await subscribe(port, topic, channel)
    await client.close()


async def receive(client: RawClient, count: int, timeout: float = 5.0) -> list[Message]:
    return [await client.read_message(timeout) for _ in range(count)]


async def drain(port: int, topic: str, channel: str, count: int, quiet: float = 0.3) -> list[Message]:
    """Exactly ``count`` messages, each FINished; then nothing more for ``quiet`` seconds."""
    client = await subscribe(port, topic, channel, rdy=max(count, 1))
    messages = await receive(client, count)
    await client.send(b"".join(b"FIN " + msg.id + b"\n" for msg in messages))
    await client.assert_no_frame(quiet)
    await client.close()
    return messages


def multiset(messages: list[Message]) -> Counter:
    return Counter(msg.body for msg in messages)


# -- two nsqd on one data directory: what each shows and delivers --------------------------

DRAIN_CHANNEL = "drain"  # what ``drain_everything`` subscribes to on a topic without channels
TOPIC_COUNTS = ("paused", "depth", "backend_depth", "message_count")
CHANNEL_COUNTS = ("paused", "depth", "backend_depth", "in_flight_count", "deferred_count", "message_count",
                  "requeue_count", "timeout_count")


# one client for every request (httpx.get and .post make a client, and its TLS context, each time:
# ~10 ms of CPU, which tests that poll /stats would spend on every poll)
HTTP = httpx.Client(timeout=10)


def http_post(server: Server, path: str, **params: str) -> None:
    answer = HTTP.post(server.http + path, params=params)
    assert answer.status_code == 200, (path, params, answer.status_code, answer.text)


def stats(server: Server) -> dict:
    return HTTP.get(server.http + "/stats", params={"format": "json"}).json()


def queues_view(server: Server) -> dict:
    """/stats reduced to what two nsqd on the same data directory must agree on:
    {topic: {counts..., "channels": {channel: {counts...}}}}."""
    view = {}
    for topic in stats(server)["topics"]:
        entry = {key: topic[key] for key in TOPIC_COUNTS}
        entry["channels"] = {channel["channel_name"]: {key: channel[key] for key in CHANNEL_COUNTS}
                             for channel in topic["channels"]}
        view[topic["topic_name"]] = entry
    return view


def settled(view: dict) -> bool:
    """Every topic that can hand its messages to channels has done so."""
    return all(topic["depth"] == 0 for topic in view.values() if topic["channels"] and not topic["paused"])


async def settled_view(server: Server) -> dict:
    """``queues_view`` once the topics' pumps have moved what they can (right after a start)."""
    async def view_if_settled() -> dict | None:
        view = queues_view(server)
        return view if settled(view) else None

    return await wait_until(view_if_settled, what="the topics' pumps done")


def unpause_everything(server: Server, view: dict) -> None:
    for topic, entry in view.items():
        if entry["paused"]:
            http_post(server, "/topic/unpause", topic=topic)
        for channel, counts in entry["channels"].items():
            if counts["paused"]:
                http_post(server, "/channel/unpause", topic=topic, channel=channel)


async def take_all(port: int, topic: str, channel: str, at_least: int, quiet: float) -> list[Message]:
    """Every message the channel delivers, each FINished: ``at_least`` of them, however long they
    take, then any more until none has come for ``quiet`` seconds (unbuffered, so none waits)."""
    client = await RawClient.connect(port)
    await client.identify(output_buffer_timeout=-1, output_buffer_size=-1)
    await client.sub(topic, channel, rdy=2500)
    messages = []
    while True:
        with trio.move_on_after(quiet if len(messages) >= at_least else 15):
            frame = await client.read_frame(timeout=20)
            if frame.frame_type == FRAME_TYPE_ERROR:
                # a second copy of an ID (read again after a kill -9) cannot be finished twice
                assert frame.data.startswith(b"E_FIN_FAILED"), frame
                continue
            msg = decode_message(frame.data)
            messages.append(msg)
            await client.send(b"FIN " + msg.id + b"\n")
            continue
        break
    await client.close()
    return messages


async def drain_everything(server: Server, view: dict, more: dict[tuple[str, str], int] = {},
                           quiet: float = 0.5) -> dict[tuple[str, str], Counter]:
    """Unpause everything, take every message of every channel (of ``DRAIN_CHANNEL`` where a
    topic has none) and of the (topic, channel) pairs in ``more``, all at once: {(topic,
    channel): Counter of (id, body, timestamp, attempts)}. Each channel has at least its depth
    in ``view`` (the nsqd just started: nothing in flight or deferred; a disk queue's depth can
    be short after a kill -9, never long), plus its topic's, plus what ``more`` says."""
    unpause_everything(server, view)
    at_least = dict.fromkeys(more, 0)
    for topic, entry in view.items():
        for channel, counts in (entry["channels"] or {DRAIN_CHANNEL: {"depth": 0}}).items():
            at_least[topic, channel] = max(counts["depth"], 0) + max(entry["depth"], 0)
    for key, count in more.items():
        at_least[key] += count
    taken: dict[tuple[str, str], Counter] = {}

    async def take(key: tuple[str, str]) -> None:
        taken[key] = Counter(await take_all(server.tcp_port, *key, at_least[key], quiet))

    async with trio.open_nursery() as nursery:
        for key in at_least:
            nursery.start_soon(take, key)
    return taken


def bodies_and_attempts(delivered: dict[tuple[str, str], Counter]) -> dict[tuple[str, str], Counter]:
    """Delivered messages reduced to (body, attempts), per (topic, channel)."""
    reduced = {}
    for key, messages in delivered.items():
        reduced[key] = Counter()
        for msg, count in messages.items():
            reduced[key][msg.body, msg.attempts] += count
    return reduced


def normalised_nsqd_dat(data: bytes) -> bytes:
    """nsqd.dat with its topics, and each topic's channels, in name order (NSQ writes them in its
    maps' random order), after checking it is written as Go's json.Marshal writes it."""
    document = json.loads(data)
    assert json.dumps(document, separators=(",", ":")).encode() == data, f"not in Go's encoding: {data!r}"
    for topic in document["topics"] or []:
        if topic["channels"]:
            topic["channels"].sort(key=lambda channel: channel["name"])
    if document["topics"]:
        document["topics"].sort(key=lambda topic: topic["name"])
    return json.dumps(document, separators=(",", ":")).encode()


def nsqd_dat_layout(data_path) -> dict[str, tuple[bool, dict[str, bool]]]:
    """nsqd.dat as NSQ reads it: {topic: (paused, {channel: paused})}."""
    return {name: (paused, dict(channels)) for name, paused, channels in go_metadata(nsqd_dat(data_path))}


def directory_summary(data_path) -> dict[str, object]:
    """Every file of a data directory as two nsqd doing the same writes and reads must leave it:
    nsqd.dat normalised, disk queue metadata byte for byte, data files by size and record count,
    and each queue's records' (attempts, body), sorted (IDs and timestamps are each nsqd's own, and
    NSQ writes the messages in flight at a stop in its map's random order, so which file holds
    which of them varies)."""
    summary: dict[str, object] = {}
    for name in sorted(os.listdir(data_path)):
        with open(os.path.join(data_path, name), "rb") as handle:
            data = handle.read()
        if name == "nsqd.dat":
            summary[name] = normalised_nsqd_dat(data)
        elif name.endswith(".diskqueue.meta.dat"):
            summary[name] = data
        else:
            messages = [decode_message(record) for record in parse_records(data)]
            summary[name] = (len(data), len(messages))
            queue = "records of " + name.split(".diskqueue.")[0]
            summary[queue] = sorted([*summary.get(queue, []), *((msg.attempts, msg.body) for msg in messages)])
    return summary


def metadata_current(server: Server) -> bool:
    """Every disk queue's metadata file says the depth /stats says (the sync after the last write
    or read has been written)."""
    for topic, entry in queues_view(server).items():
        queues = {topic: entry["backend_depth"]}
        queues.update({f"{topic}:{channel}": counts["backend_depth"] for channel, counts in entry["channels"].items()})
        for queue, depth in queues.items():
            if queue_files(server.data_path, queue) and (
                    not os.path.exists(meta_file(server.data_path, queue))
                    or parse_meta(meta_file(server.data_path, queue))[0] != depth):
                return False
    return True


def unlisted_records(data_path) -> dict[str, list[Message]]:
    """The records of every disk queue that has data but no metadata file (an nsqd killed before
    its first sync): {queue: messages}. NSQ's nsqd reads such a queue as empty (and writes over
    it); ours reads them (README, Deliberate differences)."""
    found = {}
    for name in sorted(os.listdir(data_path)):
        match = re.fullmatch(r"(.+)\.diskqueue\.000000\.dat", name)
        if match and not os.path.exists(meta_file(data_path, match.group(1))):
            with open(os.path.join(data_path, name), "rb") as handle:
                found[match.group(1)] = [decode_message(record) for record in parse_records(handle.read())]
    return found


def differences(left: dict, right: dict) -> dict:
    """{key: (only in left, only in right)} for every key whose Counters differ: what a failed
    comparison of two nsqd's deliveries prints."""
    found = {}
    for key in left.keys() | right.keys():
        mine, theirs = left.get(key, Counter()), right.get(key, Counter())
        if mine != theirs:
            found[key] = (mine - theirs, theirs - mine)
    return found
