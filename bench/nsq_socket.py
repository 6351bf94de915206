"""A minimal blocking V2 client for the benchmarks, on the sans-IO codec in common/."""

import json
import socket

from common.commands import MAGIC_V2, Identify
from common.frames import FRAME_TYPE_ERROR, FrameReader


class BenchConnection:
    def __init__(self, address: str, identify: dict | None = None):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader()
        self.sock.sendall(MAGIC_V2 + Identify({"feature_negotiation": True, **(identify or {})}).to_bytes())
        self.read_response()

    def read_frames(self):
        """Block for at least one frame; yield every complete frame received."""
        while True:
            frames = list(self.reader.frames())
            if frames:
                return frames
            data = self.sock.recv(256 * 1024)
            if not data:
                raise ConnectionError("nsqd closed the connection")
            self.reader.receive_data(data)

    def read_response(self) -> bytes:
        while True:
            for frame in self.read_frames():
                if frame.frame_type == FRAME_TYPE_ERROR:
                    raise RuntimeError(frame.data.decode())
                if frame.data != b"_heartbeat_":
                    return frame.data
                self.sock.sendall(b"NOP\n")

    def close(self) -> None:
        self.sock.close()


def parse_json(data: bytes) -> dict:
    return json.loads(data)
