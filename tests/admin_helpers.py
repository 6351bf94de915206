"""Real clusters for nsqadmin's tests: nsqlookupd, two nsqd registered with it, and nsqadmin, each a
process on ephemeral loopback ports; plus an HTTP endpoint that records nsqadmin's notifications
and a server that accepts connections but never answers."""

import json
import shutil
import signal
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from common.commands import MAGIC_V2, Fin, Identify, Nop, Rdy, Req, Sub
from common.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, FrameReader
from common.message import decode_message

from .helpers import DaemonProcess, NsqdProcess
from .lookupd_helpers import LookupdProcess
from .waiting import wait_until as wait_for  # noqa: F401 (the name the nsqadmin tests import)

E2E_PERCENTILES = "--e2e-processing-latency-percentile=0.99,0.5"


class AdminProcess(DaemonProcess):
    """A real ``python -m nsqadmin`` (or the program ``command`` names) on an ephemeral loopback port,
    recording its stats history into a directory of its own and running no scheduled rollups, unless
    ``args`` (which win) say otherwise."""

    def __init__(self, *args: str, command: list[str] | None = None):
        self.stats_dir = tempfile.mkdtemp(prefix="nsqadmin-stats-")
        super().__init__("nsqadmin", ["--http-address=127.0.0.1:0", f"--stats-dir={self.stats_dir}",
                                      "--rollup-interval=0", *args], ("HTTP",), command)
        self.http_port = self.ports["HTTP"]
        self.url = f"http://127.0.0.1:{self.http_port}"

    def stop(self, signum: int = signal.SIGTERM) -> int:
        status = super().stop(signum)
        shutil.rmtree(self.stats_dir, ignore_errors=True)
        return status


class Cluster:
    """nsqlookupd, two nsqd registered with it (the first with e2e percentiles), and nsqadmin."""

    def __init__(self, data_dir, *admin_args: str, nsqd_args: tuple[str, ...] = ()):
        self.lookupd = LookupdProcess("--broadcast-address=127.0.0.1")
        self.lookupd_http = f"127.0.0.1:{self.lookupd.http_port}"
        self.nsqds = []
        for n, extra in enumerate([(E2E_PERCENTILES,), ()]):
            path = data_dir / f"nsqd{n}"
            path.mkdir()
            self.nsqds.append(NsqdProcess(f"--data-path={path}", "--broadcast-address=127.0.0.1",
                                          f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}", *extra,
                                          *nsqd_args))
        self.admin = self.start_admin(*admin_args)

    def start_admin(self, *args: str) -> AdminProcess:
        return AdminProcess(f"--lookupd-http-address={self.lookupd_http}", *args)

    def node(self, n: int) -> str:
        """The nsqadmin node name of nsqd ``n``: its broadcast address and HTTP port."""
        return f"127.0.0.1:{self.nsqds[n].http_port}"

    def stop(self) -> list[int]:
        return [self.admin.stop(), *(nsqd.stop() for nsqd in self.nsqds), self.lookupd.stop()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for a whole test module (each test uses topics of its own); every process exits 0."""
    running = Cluster(tmp_path_factory.mktemp("cluster"))
    yield running
    assert running.stop() == [0, 0, 0, 0]


def lookupd_knows(cluster: Cluster, topic: str, producers: int) -> bool:
    """Whether nsqlookupd lists nsqd 0 to ``producers - 1`` for ``topic`` (registration is asynchronous)."""
    answer = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": topic})
    listed = {p["http_port"] for p in answer.json()["producers"]} if answer.status_code == 200 else set()
    return listed >= {nsqd.http_port for nsqd in cluster.nsqds[:producers]}


def publish(cluster: Cluster, n: int, topic: str, count: int) -> None:
    """``count`` messages to ``topic`` on nsqd ``n``, in one /mpub."""
    body = b"\n".join(b"message %d" % i for i in range(count))
    answer = httpx.post(f"http://127.0.0.1:{cluster.nsqds[n].http_port}/mpub", params={"topic": topic}, content=body)
    assert answer.status_code == 200, answer.text


def topic_on(cluster: Cluster, topic: str, channel: str = "", counts: tuple[int, ...] = (0, 0)) -> None:
    """``topic`` (with ``channel``) on each nsqd n < len(counts) with ``counts[n]`` messages published,
    once nsqlookupd lists them all as its producers."""
    for n, count in enumerate(counts):
        nsqd = f"http://127.0.0.1:{cluster.nsqds[n].http_port}"
        assert httpx.post(f"{nsqd}/topic/create", params={"topic": topic}).status_code == 200
        if channel:
            answer = httpx.post(f"{nsqd}/channel/create", params={"topic": topic, "channel": channel})
            assert answer.status_code == 200, answer.text
        if count:
            publish(cluster, n, topic, count)
    wait_for(lambda: lookupd_knows(cluster, topic, len(counts)), what=f"{topic} registered by {len(counts)} nsqd")


def nsqd_stats(cluster: Cluster, n: int, topic: str) -> dict | None:
    """nsqd ``n``'s own /stats of ``topic`` (None if it has no such topic)."""
    answer = httpx.get(f"http://127.0.0.1:{cluster.nsqds[n].http_port}/stats",
                       params={"format": "json", "topic": topic}).json()
    return (answer["topics"] or [None])[0]


class RecordingEndpoint:
    """An HTTP server that records every request and answers with ``answer(path) -> (status, JSON)``
    after ``delay`` seconds: a notification endpoint, a Graphite."""

    def __init__(self, answer=lambda path: (200, None), delay: float = 0.0):
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(delay)  # deliberate: a slow endpoint, when asked to be one
                endpoint.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                          "json": json.loads(body) if body else None})
                status, document = answer(self.path)
                payload = json.dumps(document).encode() if document is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _record

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.address}/notify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def received(self) -> list[dict]:
        """The JSON documents POSTed so far."""
        return [request["json"] for request in self.requests if request["method"] == "POST"]

    def wait_for(self, count: int, timeout: float = 5.0) -> list[dict]:
        return wait_for(lambda: len(self.received) >= count and self.received, timeout, f"{count} requests")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SilentServer:
    """Accepts TCP connections and never answers: an upstream that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()


def closed_port_address() -> str:
    """An address where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


class Consumer:
    """A V2 consumer on a real socket, in a thread: FINs every message (or REQs it at once, a
    consumer that always fails), answers heartbeats, counts deliveries."""

    def __init__(self, port: int, topic: str, channel: str, rdy: int = 1, requeue: bool = False, **identify):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.requeue = requeue
        self.delivered = 0
        self.bodies: list[bytes] = []
        self._reader = FrameReader()
        identify.setdefault("client_id", "test-consumer")
        identify.setdefault("hostname", "test-consumer.example")
        identify.setdefault("user_agent", "nsqadmin-tests/1.0")
        self.sock.sendall(MAGIC_V2 + Identify(identify).to_bytes() + Sub(topic, channel).to_bytes() + Rdy(rdy).to_bytes())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while data := self.sock.recv(65536):
                self._reader.receive_data(data)
                while (frame := self._reader.next_frame()) is not None:
                    self._handle(frame)
        except OSError:  # closed by close() or by nsqd
            return

    def _handle(self, frame) -> None:
        if frame.frame_type == FRAME_TYPE_MESSAGE:
            message = decode_message(frame.data)
            self.bodies.append(message.body)
            self.delivered += 1
            self.sock.sendall(Req(message.id, 0).to_bytes() if self.requeue else Fin(message.id).to_bytes())
        elif frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"_heartbeat_":
            self.sock.sendall(Nop().to_bytes())

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked in recv(); close() alone would not
        except OSError:  # nsqd closed it first
            pass
        self.sock.close()
        self._thread.join(timeout=5)


class Tail:
    """An open event stream of ``/api/tail/<topic>``, read event by event."""

    def __init__(self, admin_url: str, topic: str):
        self.client = httpx.Client(timeout=httpx.Timeout(5.0))
        self._stream = self.client.stream("GET", f"{admin_url}/api/tail/{topic}")
        self._response = self._stream.__enter__()
        assert self._response.status_code == 200, self._response.read()
        assert self._response.headers["content-type"].startswith("text/event-stream")
        self._lines = self._response.iter_lines()
        self.ready = self.next("ready")

    def events(self):
        """(event, data) as they come; idle comments skipped."""
        kind, data = "message", []
        for line in self._lines:
            if line.startswith(":"):
                continue
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
            elif not line and data:
                yield kind, json.loads("\n".join(data))
                kind, data = "message", []

    def next(self, wanted: str, timeout: float = 5.0) -> dict:
        deadline = time.monotonic() + timeout
        for kind, data in self.events():
            if kind == wanted:
                return data
            assert time.monotonic() < deadline, f"no {wanted} event within {timeout}s"
        raise AssertionError(f"the stream ended before a {wanted} event")

    def messages(self, count: int) -> list[dict]:
        return [self.next("message") for _ in range(count)]

    def close(self) -> None:
        self._stream.__exit__(None, None, None)
        self.client.close()
