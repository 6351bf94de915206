"""Helpers for tests of nsqd's data directory: go-diskqueue v1.1.0 files written and parsed
independently of nsqd/diskqueue.py, and real nsqd processes stopped and restarted on one
--data-path.

go-diskqueue format (NSQ v1.3 reference §1.9): ``NAME.diskqueue.%06d.dat`` holds records
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

import pytest
import trio

from common.message import HEADER_LENGTH, Message, decode_message

from .helpers import NsqdProcess, RawClient

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
    """A real nsqd on --data-path, with its HTTP port (read from its log)."""

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



def restart(server: Server, *flags: str, signum: int = signal.SIGTERM) -> Server:
    """Stop gracefully (exit 0 expected) and start again on the same data directory."""
    code = server.signal(signum)
    assert code == 0, f"exit code {code}:\n{server.log()}"
    return Server(server.data_path, *flags)


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


async def wait_until(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting for {what}")
