"""A minimal blocking V2 client for the benchmarks, on the sans-IO codec in common/.

It negotiates TLS, snappy or deflate like any NSQ client: IDENTIFY's answer arrives in
the clear, then the TLS handshake, then the codec (bytes already received with the
answer go through the decoder).
"""

import json
import socket
import ssl

from common.commands import MAGIC_V2, Identify
from common.compression import DeflateCodec, SnappyCodec
from common.frames import FRAME_TYPE_ERROR, OK, FrameReader


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """Verified against ``ca_file``, or not verified at all (a benchmark, not a client)."""
    context = ssl.create_default_context(cafile=ca_file or None)
    if not ca_file:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def add_feature_flags(parser) -> None:
    parser.add_argument("--tls", action="store_true", help="upgrade to TLS after IDENTIFY")
    parser.add_argument("--tls-root-ca-file", default="", help="verify nsqd's certificate (default: no check)")
    parser.add_argument("--snappy", action="store_true", help="snappy compression")
    parser.add_argument("--deflate", action="store_true", help="deflate compression (level 6)")


def features(args) -> dict:
    """The feature flags as plain values, to hand to worker processes."""
    return {"tls": args.tls, "ca_file": args.tls_root_ca_file, "snappy": args.snappy, "deflate": args.deflate}


def connect(address: str, feature_values: dict, identify: dict | None = None) -> "BenchConnection":
    """IDENTIFY with ``identify``'s fields; with feature negotiation only if a feature is asked for."""
    identify = dict(identify or {})
    if feature_values["tls"] or feature_values["snappy"] or feature_values["deflate"]:
        identify.update(feature_negotiation=True, tls_v1=feature_values["tls"], snappy=feature_values["snappy"],
                        deflate=feature_values["deflate"])
    tls = tls_context(feature_values["ca_file"]) if feature_values["tls"] else None
    return BenchConnection(address, identify, tls)


class BenchConnection:
    """``identify``: the IDENTIFY body (default: feature negotiation only)."""

    def __init__(self, address: str, identify: dict | None = None, tls: ssl.SSLContext | None = None):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader()
        self.codec = None
        self.sock.sendall(MAGIC_V2 + Identify({"feature_negotiation": True} if identify is None else identify)
                          .to_bytes())
        unread = bytearray()
        data = self._read_one_frame(unread)
        answer = {"tls_v1": False, "snappy": False, "deflate": False} if data == OK else json.loads(data)
        if answer["tls_v1"]:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
            self._read_one_frame(unread)  # OK, through TLS
        if answer["snappy"] or answer["deflate"]:
            self.codec = SnappyCodec() if answer["snappy"] else DeflateCodec(answer["deflate_level"])
            unread = self.codec.decode(bytes(unread))
            self.reader.receive_data(unread)
            self.read_response()  # OK, compressed
        else:
            self.reader.receive_data(bytes(unread))

    def _read_one_frame(self, unread: bytearray) -> bytes:
        """One frame's data, before any codec; what came after it stays in ``unread``."""
        while len(unread) < 4 or len(unread) < 4 + int.from_bytes(unread[:4], "big"):
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("nsqd closed the connection")
            unread += data
        end = 4 + int.from_bytes(unread[:4], "big")
        frame_type, data = int.from_bytes(unread[4:8], "big"), bytes(unread[8:end])
        del unread[:end]
        if frame_type == FRAME_TYPE_ERROR:
            raise RuntimeError(data.decode())
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.codec.encode(data) if self.codec else data)

    def receive(self) -> bytes:
        """Whatever has arrived (blocking for something), decoded; first what the frame
        reader holds, for a caller that parses frames itself from here on."""
        if self.reader.buffered:
            return self.reader.take_buffered()
        data = self.sock.recv(256 * 1024)
        if not data:
            raise ConnectionError("nsqd closed the connection")
        if isinstance(self.sock, ssl.SSLSocket):
            data += self._more_tls_records()
        return self.codec.decode(data) if self.codec else data

    def read_frames(self):
        """Block for at least one frame; every complete frame received."""
        while not (frames := list(self.reader.frames())):
            self._read_more()
        return frames

    def _read_more(self) -> None:
        """Block for more bytes from nsqd and hand them, decoded, to the frame reader."""
        data = self.sock.recv(256 * 1024)
        if not data:
            raise ConnectionError("nsqd closed the connection")
        if isinstance(self.sock, ssl.SSLSocket):
            data += self._more_tls_records()
        if self.codec:
            data = self.codec.decode(data)
        self.reader.receive_data(data)

    def _more_tls_records(self) -> bytes:
        """An SSL socket's recv returns one TLS record (16 KiB at most): take every record
        already here too, as a plain recv would take everything received."""
        timeout, chunks = self.sock.gettimeout(), []
        self.sock.settimeout(0)
        try:
            while data := self.sock.recv(256 * 1024):
                chunks.append(data)
        except (ssl.SSLWantReadError, BlockingIOError):
            pass
        finally:
            self.sock.settimeout(timeout)
        return b"".join(chunks)

    def read_response(self) -> bytes:
        """The next frame that is not a heartbeat (those are answered); later frames stay buffered."""
        while True:
            frame = self.reader.next_frame()
            if frame is None:
                self._read_more()
            elif frame.frame_type == FRAME_TYPE_ERROR:
                raise RuntimeError(frame.data.decode())
            elif frame.data != b"_heartbeat_":
                return frame.data
            else:
                self.send(b"NOP\n")

    def close(self) -> None:
        self.sock.close()


def parse_json(data: bytes) -> dict:
    return json.loads(data)
