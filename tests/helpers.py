"""Test clients that speak the V2 protocol over real sockets, built on common/'s codec."""

import functools
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import trio
import trio.testing

from common.commands import MAGIC_V2, Identify
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame, FrameReader
from common.message import Message, decode_message

ROOT = Path(__file__).resolve().parent.parent


def task_count(task=None) -> int:
    """The trio tasks running now (in this run: an in-process nsqd's with the test's)."""
    task = task or trio.lowlevel.current_root_task()
    return 1 + sum(task_count(child) for nursery in task.child_nurseries for child in nursery.child_tasks)


async def settled_task_count() -> int:
    """The tasks once every one has run to its first wait: a task started just now opens its own
    nursery (nsqd's file remover does) only when it first runs, so a count taken before that is short."""
    await trio.testing.wait_all_tasks_blocked()
    return task_count()


class LoopbackConnection:
    """A connection to a daemon on a real trio socket: its protocol's magic, raw sends, and reads
    that feed the protocol's sans-IO reader until it has what is wanted."""

    MAGIC = b""
    DAEMON = ""

    def __init__(self, stream: trio.SocketStream, reader):
        self.stream = stream
        self.reader = reader

    @classmethod
    async def connect(cls, port: int, magic: bool = True):
        connection = cls(await trio.open_tcp_stream("127.0.0.1", port))
        if magic:
            await connection.send(cls.MAGIC)
        return connection

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive_until(self, parsed):
        """What ``parsed()`` gives once it gives something; EOFError once the daemon has closed."""
        while (item := parsed()) is None:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError(f"connection closed by {self.DAEMON}")
            self.reader.receive_data(data)
        return item


class RawClient(LoopbackConnection):
    """A V2 client on a real trio socket: send raw bytes, read whole frames."""

    MAGIC = MAGIC_V2
    DAEMON = "nsqd"

    def __init__(self, stream: trio.SocketStream):
        super().__init__(stream, FrameReader())

    async def read_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame that is not a heartbeat."""
        with trio.fail_after(timeout):
            while True:
                frame = await self.read_any_frame(math.inf)
                if frame.frame_type != FRAME_TYPE_RESPONSE or frame.data != b"_heartbeat_":
                    return frame

    async def read_any_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame, heartbeats included; EOFError once nsqd has closed the connection."""
        with trio.fail_after(timeout):
            return await self.receive_until(self.reader.next_frame)

    async def read_response(self) -> bytes:
        frame = await self.read_frame()
        assert frame.frame_type == FRAME_TYPE_RESPONSE, frame
        return frame.data

    async def read_error(self) -> bytes:
        frame = await self.read_frame()
        assert frame.frame_type == FRAME_TYPE_ERROR, frame
        return frame.data

    async def read_message(self, timeout: float = 5.0) -> Message:
        frame = await self.read_frame(timeout)
        assert frame.frame_type == FRAME_TYPE_MESSAGE, frame
        return decode_message(frame.data)

    async def assert_no_frame(self, within: float) -> None:
        with trio.move_on_after(within):
            frame = await self.read_frame(timeout=within + 1)
            raise AssertionError(f"unexpected frame {frame}")

    async def assert_closed(self, timeout: float = 5.0) -> None:
        """nsqd closed the connection (after any frames still in flight)."""
        with trio.fail_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return

    async def identify(self, **data) -> dict | bytes:
        await self.send(Identify(data).to_bytes())
        answer = await self.read_response()
        return json.loads(answer) if data.get("feature_negotiation") else answer

    async def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        await self.send(f"SUB {topic} {channel}\n".encode())
        assert await self.read_response() == b"OK"
        if rdy is not None:
            await self.send(b"RDY %d\n" % rdy)

    async def close(self) -> None:
        await self.stream.aclose()


class DaemonProcess:
    """A real daemon, ``python -m <module>`` or the program ``command`` names (NSQ's Go daemons log
    their listeners the same way); its log is kept, its listening ports read from it."""

    def __init__(self, module: str, args: list[str], listeners: tuple[str, ...], command: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.args = args
        self.proc = subprocess.Popen([*(command or [sys.executable, "-m", module]), *args], cwd=ROOT,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.log_lines: list[str] = []
        self.ports = self._wait_for_ports(module, listeners)
        self._log_reader = threading.Thread(target=self._keep_log, daemon=True)
        self._log_reader.start()

    def _keep_log(self) -> None:
        """Read the log as it comes, so the daemon never blocks on a full stderr pipe."""
        for line in self.proc.stderr:
            self.log_lines.append(line)

    def _wait_for_ports(self, module: str, listeners: tuple[str, ...]) -> dict[str, int]:
        ports: dict[str, int] = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(ports) < len(listeners):
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log_lines.append(line)
            match = re.search(r"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)", line)
            if match and match.group(1) in listeners:
                ports[match.group(1)] = int(match.group(2))
        if len(ports) < len(listeners):
            self.proc.kill()
            raise RuntimeError(f"{module} did not start:\n" + "".join(self.log_lines))
        return ports

    def log(self) -> str:
        return "".join(self.log_lines)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        code = self.proc.wait(timeout=15)
        self._log_reader.join(timeout=5)
        return code


class NsqdProcess(DaemonProcess):
    """A real nsqd process on an ephemeral loopback port (this project's; tests/go_nsq.py has NSQ's)."""

    command: list[str] | None = None
    io_backend = ""  # --io-backend for this project's nsqd (tests/conftest.py sets it per test)

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        backend = [f"--io-backend={self.io_backend}"] if self.io_backend and self.command is None else []
        super().__init__("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *backend, *args],
                         ("TCP",), self.command, env)
        self.tcp_port = self.ports["TCP"]
        self.tcp_address = f"127.0.0.1:{self.tcp_port}"

    @functools.cached_property
    def http_port(self) -> int:
        """The HTTP port nsqd logged it listens on."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for line in list(self.log_lines):
                match = re.search(r"HTTP: listening on 127\.0\.0\.1:(\d+)", line)
                if match:
                    return int(match.group(1))
            time.sleep(0.01)
        raise RuntimeError("no HTTP listener in the log:\n" + "".join(self.log_lines))
