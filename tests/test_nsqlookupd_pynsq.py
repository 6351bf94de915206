"""pynsq (NSQ's official Python client) discovers an nsqd through a real nsqlookupd process.

The nsqd registration is made by a V1 peer socket in the test (this project's nsqd does
not register with lookupds yet); pynsq's Reader then finds that nsqd only through
``GET /lookup`` and consumes from it.
"""

import asyncio
import socket
import struct
import time

import nsq
import tornado.ioloop

from common.protocol_v1 import MAGIC_V1, Identify, Register, ResponseReader, is_error

from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess


def register_nsqd(lookupd: LookupdProcess, nsqd_tcp_port: int, topic: str, channel: str) -> socket.socket:
    """Speak V1 for the nsqd, as its lookup peer would; the socket must stay open."""
    sock = socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=5)
    info = {"broadcast_address": "127.0.0.1", "hostname": "test", "tcp_port": nsqd_tcp_port, "http_port": 1,
            "version": "1.3.0"}
    sock.sendall(MAGIC_V1 + Identify(info).to_bytes() + Register(topic, channel).to_bytes())
    reader, replies = ResponseReader(), []
    while len(replies) < 2:
        reader.receive_data(sock.recv(65536))
        while (reply := reader.next_response()) is not None:
            replies.append(reply)
    assert not any(is_error(reply) for reply in replies), replies
    return sock


def publish(nsqd: NsqdProcess, topic: str, body: bytes) -> None:
    with socket.create_connection(("127.0.0.1", nsqd.tcp_port), timeout=5) as sock:
        sock.sendall(b"  V2" + f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body)
        assert sock.recv(64) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


def test_pynsq_reader_finds_nsqd_through_lookupd(tmp_path):
    lookupd = LookupdProcess()
    nsqd = NsqdProcess(f"--data-path={tmp_path}")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = tornado.ioloop.IOLoop.current()
    try:
        peer = register_nsqd(lookupd, nsqd.tcp_port, "discovered", "ch")
        publish(nsqd, "discovered", b"found me")
        received = []

        def handler(message):
            received.append(message.body)
            return True

        reader = nsq.Reader(topic="discovered", channel="ch", message_handler=handler,
                            lookupd_http_addresses=[f"http://127.0.0.1:{lookupd.http_port}"], lookupd_poll_interval=1)
        deadline = time.monotonic() + 10

        def check():
            if received or time.monotonic() > deadline:
                io_loop.stop()

        poller = tornado.ioloop.PeriodicCallback(check, 10)
        poller.start()
        io_loop.start()
        poller.stop()
        assert received == [b"found me"]
        reader.close()
        peer.close()
    finally:
        io_loop.close(all_fds=True)
        asyncio.set_event_loop(None)
        nsqd.stop()
        assert lookupd.stop() == 0
    assert any("GET /lookup?topic=discovered" in line for line in lookupd.log_lines)
