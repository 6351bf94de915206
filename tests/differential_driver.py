"""The differential tests' step runner: each step against NSQ's Go daemon and ours, side by side.

A pair (:class:`NsqdPair`, and tests/differential_lookupd_driver.py's LookupdPair) is one of NSQ's daemons and one of ours started with
the same flags, and the test's connections to each, opened, named and used alike. Every step (bytes on
a connection, an HTTP request) goes to Go's daemon, then to ours; what each answers is read,
normalised (tests/differential_normalise.py) and must be equal, else :class:`Difference` shows the
two side by side. After each nsqd step the pair waits until each daemon is quiet, reads the messages
each delivered meanwhile, and compares their /stats (JSON with clients, and the text format).

How long to read is decided by the protocol, never by a timer (timers here only bound a failure):

* V2, connection in the init state: every complete command but NOP is answered, and every error
  there is fatal, so a step reads as many answers as it sent such commands, or up to the close;
  after an error it reads on to the close.
* V2, subscribed or closing (or the step SUBs): RDY, FIN, REQ, TOUCH and NOP are silent on success,
  so the step is followed by a *barrier*, ``FIN <an ID no message has>``, whose E_FIN_FAILED answer
  (never fatal in these states) ends the step; it is taken out of the answers.
* A step that leaves a command unfinished (a partial frame) reads nothing: the step that finishes
  the command reads its answer.
* V1 (nsqlookupd): every command is answered, every error is fatal.
* Deliveries: a daemon is quiet when no topic holds messages for its channels, no channel holds
  messages for a ready client, every client it lists is still connected, ephemeral channels and
  topics left empty are gone, and two /stats in a row agree. Then each connection has been sent
  the ``message_count`` its /stats entry says, and that many MESSAGE frames are read from it.

Heartbeats are dropped from what is compared: when they come depends on the clock.
"""

import difflib
import json
import re
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from common.commands import MAGIC_V2
from common.compression import DeflateCodec, SnappyCodec
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT, FrameReader

from .differential_normalise import Names, frame_line, http_lines, json_lines, stats_text_lines
from .go_nsq import GoNsqdProcess
from .helpers import NsqdProcess

ANSWER_TIMEOUT = 10.0  # failure bound for an answer that should come
CLOSE_TIMEOUT = 2.0  # failure bound for a close that should follow a fatal error
SETTLE_TIMEOUT = 10.0  # failure bound for a daemon to become quiet
POLL_INTERVAL = 0.003
BARRIER_ID = b"BARRIERBARRIER00"  # 16 bytes, not hex: no daemon's message ID
BARRIER = b"FIN " + BARRIER_ID + b"\n"
CLOSED = "CLOSED"
_SIZE = struct.Struct(">i")


class Difference(AssertionError):
    """Go's daemon and ours answered a step differently."""

    def __init__(self, what: str, go: list[str], ours: list[str]):
        diff = "\n".join(difflib.unified_diff(go, ours, "go", "ours", lineterm="", n=2))
        super().__init__(f"{what}: Go's daemon and ours differ\n{diff}")


class Stalled(RuntimeError):
    """NSQ's own daemon did not do what the driver waits for: the driver's expectation is wrong."""


def compare(what: str, go: list[str], ours: list[str]) -> list[str]:
    if go != ours:
        raise Difference(what, go, ours)
    return go


# -- what to send ----------------------------------------------------------------------------------


class Wire(NamedTuple):
    """Bytes for a V2 connection. ``replies``: how many answers they get in the init state;
    ``subscribes``: they hold a SUB (a barrier follows); ``partial``: they end mid-command.
    ``<m3>`` in the bytes stands for the ID each side gave message m3."""

    data: bytes
    replies: int = 1
    subscribes: bool = False
    partial: bool = False

    def __add__(self, other: "Wire") -> "Wire":
        return Wire(self.data + other.data, self.replies + other.replies, self.subscribes or other.subscribes,
                    other.partial)


def command(line: bytes | str, body: bytes | None = None) -> Wire:
    """One V2 command: ``line`` (no newline), then ``[size][body]`` if a body is given."""
    line = line.encode() if isinstance(line, str) else line
    data = line + b"\n" + (b"" if body is None else _SIZE.pack(len(body)) + body)
    return Wire(data, 0 if line == b"NOP" else 1, line.startswith(b"SUB"))


def identify(**settings) -> Wire:
    return command("IDENTIFY", json.dumps(settings).encode())


def mpub_body(*bodies: bytes) -> bytes:
    return _SIZE.pack(len(bodies)) + b"".join(_SIZE.pack(len(body)) + body for body in bodies)


def raw(data: bytes, replies: int = 1, partial: bool = False) -> Wire:
    return Wire(data, replies, b"SUB" in data, partial)


# -- connections -------------------------------------------------------------------------------------


class Connection:
    """One test connection to one daemon, on a blocking socket."""

    def __init__(self, name: str, port: int, reader):
        self.name = name
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.reader = reader
        self.closed = False
        self.in_flight_state = False  # V2: subscribed or closing, so silent commands need a barrier
        self.messages = 0  # V2: MESSAGE frames received
        self.deliveries: list[str] = []  # V2: their lines, until the pair compares deliveries
        self.delivered: dict[str, None] = {}  # V2: the names of the messages it was sent, in order
        self.codec = None  # V2: the compression IDENTIFY negotiated
        self.codec_after_next_frame = None  # V2: with TLS too, it starts after TLS's OK
        self.tls = False

    def start_tls(self) -> None:
        """IDENTIFY negotiated TLS: the handshake, then everything through it (the certificate is
        not checked; what the daemons say is)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.sock = context.wrap_socket(self.sock)
        self.tls = True

    def compress(self, codec) -> None:
        """From now on both ways go through ``codec``; what was received after the IDENTIFY
        answer was already compressed."""
        self.codec = codec
        self.reader.receive_data(self._decode(self.reader.take_buffered()))

    def _decode(self, data: bytes) -> bytes:
        decoded = self.codec.decode(data)
        while self.codec.backlog:
            decoded += self.codec.decode(b"")
        return decoded

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self.sock.sendall(data if self.codec is None else self.codec.encode(data))
        except OSError:
            pass  # the daemon closed it: the reads see that

    def receive(self, deadline: float) -> bool:
        """Read more into the reader; False once the daemon has closed the connection."""
        if self.closed:
            return False
        self.sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except OSError:
            data = b""
        if not data:
            self.closed = True
            self.sock.close()
            return False
        self.reader.receive_data(data if self.codec is None else self._decode(data))
        return True

    def hang_up(self) -> None:
        if not self.closed:
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()


# -- one side's nsqd ----------------------------------------------------------------------------------


class NsqdSide:
    """One nsqd (Go's or ours), its HTTP client and the test's V2 connections to it."""

    def __init__(self, label: str, process_class, data_path: Path, flags: tuple[str, ...]):
        self.label = label
        data_path.mkdir(parents=True, exist_ok=True)
        self.process = process_class(f"--data-path={data_path}", *flags)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.process.http_port}", timeout=ANSWER_TIMEOUT)
        self.names = Names()
        self.names.ports.update({self.process.tcp_port: "nsqd-tcp", self.process.http_port: "nsqd-http"})
        self.names.paths[str(data_path)] = "<data-path>"
        self.stats_http = self.http  # with --tls-required=true, plain HTTP is refused: /stats comes by HTTPS
        if any(flag.startswith("--https-address") for flag in flags):
            https_port = self._https_port()
            self.names.ports[https_port] = "nsqd-https"
            if "--tls-required=true" in flags:
                self.stats_http = httpx.Client(base_url=f"https://127.0.0.1:{https_port}", verify=False,
                                               timeout=ANSWER_TIMEOUT)
        self.conns: dict[str, Connection] = {}
        self.ephemeral_in_use: set[tuple[str, str]] = set()  # (topic, channel) with clients when last quiet
        self.ephemeral_topics: set[str] = set()  # ephemeral topics with channels when last quiet
        self.last_stats: dict = {}  # /stats (JSON) when last quiet

    def _https_port(self) -> int:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while not (found := re.search(r"HTTPS: listening on 127\.0\.0\.1:(\d+)", self.process.log())):
            if time.monotonic() > deadline:
                raise Stalled(f"{self.label}'s nsqd: no HTTPS listener in its log")
            time.sleep(POLL_INTERVAL)
        return int(found.group(1))

    def stop(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.http.close()
        self.stats_http.close()
        self.process.stop()

    def stall(self, what: str) -> list[str]:
        """Go's daemon must do what the driver waits for; ours may not, and the diff shows it."""
        if self.label == "go":
            raise Stalled(f"NSQ's nsqd: {what}")
        return [f"STALLED {what}"]

    # -- V2 ---------------------------------------------------------------------------------

    def connect(self, name: str, magic: bytes) -> list[str]:
        conn = self.conns[name] = Connection(name, self.process.tcp_port, FrameReader())
        self.names.ports[conn.local_port] = name
        conn.send(magic)
        if magic == MAGIC_V2 or len(magic) < len(MAGIC_V2):
            return []
        return self._read_answers(conn, 1)

    def send(self, name: str, wire: Wire) -> list[str]:
        conn = self.conns[name]
        data = wire.data
        for msg_name, real in self.names.real_ids.items():
            data = data.replace(f"<{msg_name}>".encode(), real)
        if wire.partial:
            conn.send(data)
            return []
        if conn.in_flight_state or wire.subscribes:
            conn.send(data + BARRIER)
            return self._read_to_barrier(conn)
        conn.send(data)
        return self._read_answers(conn, wire.replies)

    def hang_up(self, name: str) -> list[str]:
        """The client closes its side; what the daemon still sends, then its close. (A TLS
        connection is closed at once: a TLS socket cannot close one side only.)"""
        conn = self.conns[name]
        if conn.tls:
            conn.close()
            return [CLOSED]
        conn.hang_up()
        lines = []
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while (frame := self._next_frame(conn, deadline)) not in (None, "timeout"):
            lines.append(self._line(frame))
        return lines + ([CLOSED] if frame is None else self.stall(f"{name} not closed after the client's"))

    def _next_frame(self, conn: Connection, deadline: float, messages: bool = False):
        """The next frame that answers a command, or with ``messages`` the next MESSAGE too;
        None at the close, "timeout" past the deadline. Heartbeats are dropped (when they come
        depends on the clock) and messages put aside for the deliveries (whether one comes
        before or after an answer to another command depends on the clock too)."""
        while True:
            frame = conn.reader.next_frame()
            if frame is not None:
                if conn.codec_after_next_frame is not None:
                    conn.compress(conn.codec_after_next_frame)
                    conn.codec_after_next_frame = None
                if frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == HEARTBEAT:
                    continue
                if frame.frame_type == FRAME_TYPE_RESPONSE and frame.data.startswith(b"{"):
                    _negotiated(conn, frame.data)
                if frame.frame_type == FRAME_TYPE_MESSAGE:
                    conn.messages += 1
                    line = self._line(frame)
                    conn.delivered[line.split()[1]] = None
                    conn.deliveries.append(f"{conn.name} < {line}")
                    if not messages:
                        continue
                return frame
            if time.monotonic() >= deadline:
                return "timeout"
            if not conn.receive(deadline):
                return None

    def _line(self, frame) -> str:
        return frame_line(frame, self.names)

    def _read_answers(self, conn: Connection, count: int) -> list[str]:
        lines, answers = [], 0
        deadline = time.monotonic() + ANSWER_TIMEOUT
        fatal = False
        while answers < count or fatal:
            frame = self._next_frame(conn, deadline if not fatal else min(deadline, time.monotonic() + CLOSE_TIMEOUT))
            if frame is None:
                return lines + [CLOSED]
            if frame == "timeout":
                return lines + (["NOT CLOSED after the error"] if fatal else self.stall(f"{conn.name}: an answer"))
            lines.append(self._line(frame))
            answers += 1
            fatal = fatal or frame.frame_type == FRAME_TYPE_ERROR
        return lines

    def _read_to_barrier(self, conn: Connection) -> list[str]:
        lines = []
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while True:
            frame = self._next_frame(conn, deadline)
            if frame is None:
                conn.in_flight_state = False
                return lines + [CLOSED]
            if frame == "timeout":
                return lines + self.stall(f"{conn.name}: the barrier's answer")
            if frame.frame_type == FRAME_TYPE_ERROR and BARRIER_ID in frame.data:
                conn.in_flight_state = frame.data.startswith(b"E_FIN_FAILED")
                if not conn.in_flight_state:  # FIN refused in this state: an E_INVALID, fatal
                    lines.append(self._line(frame))
                return lines
            lines.append(self._line(frame))

    # -- HTTP -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: bytes, headers: dict | None) -> list[str]:
        response = self.http.request(method, path, content=body, headers=headers)
        text_stats = path.startswith("/stats") and "format=json" not in path and response.status_code == 200
        return http_lines(response.status_code, response.headers, response.content, self.names, text_stats)

    # -- quiet, deliveries and /stats --------------------------------------------------------

    def stats(self) -> tuple[dict, str]:
        response = self.stats_http.get("/stats", params={"format": "json", "include_clients": "true"})
        return response.json(), response.text

    def settle(self) -> tuple[list[str], list[str]]:
        """Wait until quiet; then the messages delivered since the last step, and /stats."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        previous = None
        while True:
            document, text = self.stats()
            reason = self._unquiet(document)
            fingerprint = _fingerprint(document)
            if reason is None and fingerprint == previous:
                break
            previous = fingerprint if reason is None else None
            if time.monotonic() > deadline:
                stalled = self.stall(f"never quiet: {reason}")
                return stalled, stalled
            time.sleep(POLL_INTERVAL)
        self._note_ephemerals(document)
        self.last_stats = document
        messages = self._read_deliveries(document)
        return messages, json_lines(text, self.names) + self._text_stats()

    def _text_stats(self) -> list[str]:
        response = self.stats_http.get("/stats", params={"include_clients": "true"})
        return ["text " + line for line in stats_text_lines(response.text, self.names)]

    def _open_ports(self) -> set[int]:
        return {conn.local_port for conn in self.conns.values() if not conn.closed}

    def _unquiet(self, document: dict) -> str | None:
        """Why the daemon may still change on its own (None: it will not)."""
        open_ports = self._open_ports()
        for producer in document["producers"] or []:
            if _port(producer) not in open_ports:
                return f"producer {producer['remote_address']} still listed"
        for topic in document["topics"] or []:
            name = topic["topic_name"]
            if not topic["paused"] and topic["channels"] and topic["depth"] > 0:
                return f"topic {name} still holds messages for its channels"
            if name in self.ephemeral_topics and not topic["channels"]:
                return f"ephemeral topic {name} without channels still there"
            for channel in topic["channels"]:
                clients = channel["clients"] or []
                for client in clients:
                    if _port(client) not in open_ports:
                        return f"client {client['remote_address']} of {name}/{channel['channel_name']} still listed"
                if (name, channel["channel_name"]) in self.ephemeral_in_use and not clients:
                    return f"ephemeral channel {name}/{channel['channel_name']} without clients still there"
                ready = any(c["state"] == 3 and c["ready_count"] > c["in_flight_count"] for c in clients)
                if not channel["paused"] and channel["depth"] > 0 and ready:
                    return f"channel {name}/{channel['channel_name']} still delivering"
        return None

    def _note_ephemerals(self, document: dict) -> None:
        self.ephemeral_in_use = {(topic["topic_name"], channel["channel_name"])
                                 for topic in document["topics"] or [] for channel in topic["channels"]
                                 if channel["channel_name"].endswith("#ephemeral") and channel["clients"]}
        self.ephemeral_topics = {topic["topic_name"] for topic in document["topics"] or []
                                 if topic["topic_name"].endswith("#ephemeral") and topic["channels"]}

    def _read_deliveries(self, document: dict) -> list[str]:
        sent = {_port(client): client["message_count"] for topic in document["topics"] or []
                for channel in topic["channels"] for client in channel["clients"] or []}
        lines = []
        for name in sorted(self.conns):
            conn = self.conns[name]
            deadline = time.monotonic() + ANSWER_TIMEOUT
            while conn.messages < sent.get(conn.local_port, 0):
                frame = self._next_frame(conn, deadline, messages=True)
                if frame is None:
                    conn.deliveries.append(f"{name} < {CLOSED}")
                    break
                if frame == "timeout":
                    conn.deliveries += self.stall(f"{name}: {sent[conn.local_port] - conn.messages} more messages")
                    break
                if frame.frame_type != FRAME_TYPE_MESSAGE:
                    conn.deliveries.append(f"{name} < {self._line(frame)}")
            lines += conn.deliveries
            conn.deliveries = []
        return lines


def _negotiated(conn: Connection, answer: bytes) -> None:
    """After IDENTIFY's answer, the upgrades it negotiated: TLS, then compression (which, with
    TLS, starts after the OK that comes through TLS)."""
    try:
        features = json.loads(answer)
    except ValueError:
        return
    codec = (SnappyCodec() if features.get("snappy") is True
             else DeflateCodec(features.get("deflate_level") or 6) if features.get("deflate") is True else None)
    if features.get("tls_v1") is True:
        conn.start_tls()
        conn.codec_after_next_frame = codec
    elif codec is not None:
        conn.compress(codec)


def _port(client: dict) -> int:
    return int(client["remote_address"].rsplit(":", 1)[1])


def _fingerprint(document: dict) -> str:
    """/stats without what moves on its own (memory, latency percentiles)."""
    def strip(value):
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()
                    if key not in ("memory", "e2e_processing_latency", "connect_ts")}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value
    return json.dumps(strip(document), sort_keys=True)


class NsqdPair:
    """NSQ's nsqd and ours, with the same flags, driven step by step."""

    def __init__(self, data_path: Path, *flags: str):
        self.data_path = data_path
        self.flags = flags
        self.diverged = False
        self._start()

    def _start(self) -> None:
        self.go = NsqdSide("go", GoNsqdProcess, self.data_path / "go", self.flags)
        try:
            self.ours = NsqdSide("ours", NsqdProcess, self.data_path / "ours", self.flags)
        except BaseException:
            self.go.stop()
            raise

    @property
    def sides(self) -> tuple[NsqdSide, NsqdSide]:
        return self.go, self.ours

    def stop(self) -> None:
        for side in self.sides:
            side.stop()

    def restart(self, fresh_data: bool = True) -> None:
        """New daemons (in new data directories, unless ``fresh_data`` is false)."""
        self.stop()
        if fresh_data:
            self.data_path = self.data_path.with_name(self.data_path.name + "+")
        self.diverged = False
        self._start()

    def _both(self, what: str, run) -> list[str]:
        self.diverged = True  # until both have answered alike
        lines = compare(what, run(self.go), run(self.ours))
        self.diverged = False
        return lines

    def apart(self, name: str, wire: Wire) -> tuple[list[str], list[str]]:
        """Send to both without comparing, for a difference the README lists: what Go's answered,
        what ours did. The daemons are replaced after the test."""
        self.diverged = True
        return self.go.send(name, wire), self.ours.send(name, wire)

    def http_apart(self, method: str, path: str, body: bytes = b"") -> tuple[list[str], list[str]]:
        """An HTTP request to both without comparing (see :meth:`apart`)."""
        self.diverged = True
        return self.go.request(method, path, body, None), self.ours.request(method, path, body, None)

    def stats_apart(self) -> tuple[dict, dict]:
        """Both /stats once quiet, without comparing (see :meth:`apart`)."""
        self.diverged = True
        for side in self.sides:
            side.settle()
        return self.go.last_stats, self.ours.last_stats

    def check(self) -> None:
        """Wait until both are quiet; compare what they delivered since, then their /stats."""
        settled = [side.settle() for side in self.sides]
        self.diverged = True
        compare("messages delivered", settled[0][0], settled[1][0])
        compare("/stats", settled[0][1], settled[1][1])
        self.diverged = False

    # -- steps --------------------------------------------------------------------------------

    def connect(self, name: str, magic: bytes = MAGIC_V2, check: bool = True) -> list[str]:
        lines = self._both(f"connect {name}", lambda side: side.connect(name, magic))
        if check:
            self.check()
        return lines

    def send(self, name: str, wire: Wire, check: bool = True) -> list[str]:
        lines = self._both(f"{name} > {wire.data[:200]!r}", lambda side: side.send(name, wire))
        if check:
            self.check()
        return lines

    def release(self, name: str) -> None:
        """The client stops taking messages and requeues every message it was sent (those no longer
        in flight get E_REQ_FAILED). NSQ leaves the messages of a client that is gone in flight until
        they time out, we requeue them at once (README, Deliberate differences): a test that wants
        the same /stats after a client goes returns its messages first."""
        conn = self.go.conns[name]
        if conn.in_flight_state and not conn.closed:
            wire = command("RDY 0")
            for message in conn.delivered:
                wire += command(f"REQ <{message}> 0")
            self.send(name, wire, check=False)

    def hang_up(self, name: str, check: bool = True, release: bool = True) -> list[str]:
        """The client closes the connection, with ``release`` after :meth:`release`."""
        if release:
            self.release(name)
        lines = self._both(f"{name} hangs up", lambda side: side.hang_up(name))
        if check:
            self.check()
        return lines

    def hang_up_all(self) -> None:
        for name in sorted(self.go.conns):
            if not self.go.conns[name].closed or not self.ours.conns[name].closed:
                self.hang_up(name, check=False)
        self.check()

    def end_test(self) -> None:
        """Between tests: every connection hung up (and compared), or new daemons if the last
        test left them different."""
        try:
            if not self.diverged:
                self.hang_up_all()
        finally:
            if self.diverged:
                self.restart()
            for side in self.sides:
                side.conns.clear()
                side.names.forget_messages()

    def http(self, method: str, path: str, body: bytes = b"", headers: dict | None = None,
             check: bool = True) -> list[str]:
        lines = self._both(f"{method} {path} {body[:100]!r}", lambda side: side.request(method, path, body, headers))
        if check:
            self.check()
        return lines

    def wait_until(self, what: str, predicate) -> None:
        """Wait (bounded) until ``predicate(stats document)`` holds on both sides, then check."""
        for side in self.sides:
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while not predicate(side.stats()[0]):
                if time.monotonic() > deadline:
                    side.stall(what)
                    break
                time.sleep(POLL_INTERVAL)
        self.check()


def nsqd_pair_fixture(*flags: str, name: str = "nsqd_pair", more_flags: str = ""):
    """A module's ``nsqd_pair`` fixture (or ``name``): the daemons, started with ``flags`` (and
    those the fixture named ``more_flags`` gives), live for the module; with :func:`pair`, each
    test ends with its connections hung up and compared."""
    @pytest.fixture(scope="module", name=name)
    def nsqd_pair(request, tmp_path_factory):
        extra = request.getfixturevalue(more_flags) if more_flags else ()
        started = NsqdPair(tmp_path_factory.mktemp("differential"), *flags, *extra)
        yield started
        started.stop()
    return nsqd_pair


@pytest.fixture
def pair(nsqd_pair):
    yield nsqd_pair
    nsqd_pair.end_test()
