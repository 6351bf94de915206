"""Test-side TLS and compression for raw V2 clients, and the certificates they use.

A client negotiates with IDENTIFY like go-nsq does: it reads the answer in the clear,
then shakes hands (TLS), then switches codec; bytes that arrived with the answer are
already compressed and go through the new decoder.
"""

import json
import ssl
import struct

import pytest
import trio
import trustme

from common.commands import Identify
from common.compression import DeflateCodec, SnappyCodec
from common.frames import FRAME_TYPE_RESPONSE, FrameReader
from nsqd.stream_backend import CompressedStream

from .helpers import RawClient


class Certificates:
    """A CA, nsqd's certificate for 127.0.0.1/localhost, and files nsqd can read."""

    def __init__(self, directory):
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = str(directory / "ca.pem")
        self.cert_file = str(directory / "server.pem")
        self.key_file = str(directory / "server.key")
        self.ca.cert_pem.write_to_path(self.ca_file)
        server.cert_chain_pems[0].write_to_path(self.cert_file)
        server.private_key_pem.write_to_path(self.key_file)

    def nsqd_options(self, **extra) -> dict:
        return {"tls_cert": self.cert_file, "tls_key": self.key_file, "https_address": "127.0.0.1:0", **extra}

    def client_context(self, client_cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if client_cert is not None:
            client_cert.configure_cert(context)
        return context


@pytest.fixture
def certs(tmp_path) -> Certificates:
    return Certificates(tmp_path)


async def read_frame_exactly(stream, pending: bytearray) -> tuple[int, bytes]:
    """One frame, reading no further than needed except what one receive brings (kept in ``pending``)."""
    while True:
        if len(pending) >= 4:
            size = struct.unpack_from(">i", pending)[0]
            if len(pending) >= 4 + size:
                frame_type = struct.unpack_from(">i", pending, 4)[0]
                data = bytes(pending[8 : 4 + size])
                del pending[: 4 + size]
                return frame_type, data
        data = await stream.receive_some(65536)
        if not data:
            raise EOFError("connection closed by nsqd")
        pending += data


async def negotiate(client: RawClient, context: ssl.SSLContext | None = None, **identify) -> dict:
    """IDENTIFY with feature negotiation, then the upgrades nsqd granted; the answer."""
    stream = client.stream
    await stream.send_all(Identify({"feature_negotiation": True, **identify}).to_bytes())
    pending = bytearray()
    frame_type, data = await read_frame_exactly(stream, pending)
    if frame_type != FRAME_TYPE_RESPONSE:
        raise ConnectionError(data.decode())
    answer = json.loads(data)
    if answer["tls_v1"]:
        assert not pending, "nsqd sent something before the TLS handshake"
        stream = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
        await stream.do_handshake()
        assert await read_frame_exactly(stream, pending) == (FRAME_TYPE_RESPONSE, b"OK")
    codec = SnappyCodec() if answer["snappy"] else DeflateCodec(answer["deflate_level"]) if answer["deflate"] else None
    if codec is not None:
        stream = CompressedStream(stream, codec, bytes(pending))
        pending.clear()
        assert await read_frame_exactly(stream, pending) == (FRAME_TYPE_RESPONSE, b"OK")
    client.stream = stream
    client.reader = FrameReader()
    client.reader.receive_data(bytes(pending))
    return answer


async def connect(port: int, context: ssl.SSLContext | None = None, **identify) -> tuple[RawClient, dict]:
    client = await RawClient.connect(port)
    return client, await negotiate(client, context, **identify)
