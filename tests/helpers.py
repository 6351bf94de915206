"""Test clients that speak the V2 protocol over real sockets, built on common/'s codec."""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import trio

from common.commands import MAGIC_V2, Identify
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame, FrameReader
from common.message import Message, decode_message

ROOT = Path(__file__).resolve().parent.parent


class RawClient:
    """A V2 client on a real trio socket: send raw bytes, read whole frames."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.reader = FrameReader()

    @classmethod
    async def connect(cls, port: int, magic: bool = True) -> "RawClient":
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        if magic:
            await client.send(MAGIC_V2)
        return client

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame that is not a heartbeat."""
        with trio.fail_after(timeout):
            while True:
                frame = self.reader.next_frame()
                if frame is not None:
                    if frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"_heartbeat_":
                        continue
                    return frame
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("connection closed by nsqd")
                self.reader.receive_data(data)

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


class NsqdProcess:
    """A real nsqd process on an ephemeral loopback port."""

    def __init__(self, *args: str):
        self.args = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *args]
        self.proc = subprocess.Popen([sys.executable, "-m", "nsqd", *self.args], cwd=ROOT,
                                     stderr=subprocess.PIPE, text=True)
        self.log_lines: list[str] = []
        self.tcp_port = self._wait_for_port()
        self.tcp_address = f"127.0.0.1:{self.tcp_port}"
        self._log_reader = threading.Thread(target=self._keep_log, daemon=True)
        self._log_reader.start()

    def _keep_log(self) -> None:
        """Read the log as it comes, so nsqd never blocks on a full stderr pipe."""
        for line in self.proc.stderr:
            self.log_lines.append(line)

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log_lines.append(line)
            match = re.search(r"TCP: listening on 127\.0\.0\.1:(\d+)", line)
            if match:
                return int(match.group(1))
        self.proc.kill()
        raise RuntimeError("nsqd did not start:\n" + "".join(self.log_lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(timeout=15)
        self._log_reader.join(timeout=5)
        return code
