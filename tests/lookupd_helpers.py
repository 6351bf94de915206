"""Fixtures and clients for nsqlookupd tests: an in-process daemon with a settable clock,
a V1 peer on a real socket built on common/protocol_v1, and a real nsqlookupd process."""

import json

import httpx
import pytest
import trio

from common.protocol_v1 import MAGIC_V1, Identify, Ping, Register, ResponseReader, Unregister
from nsqlookupd.nsqlookupd import NSQLookupd
from nsqlookupd.options import default_options

from .helpers import DaemonProcess, LoopbackConnection
from .waiting import await_until as wait_until  # noqa: F401 (the name the lookupd tests import)

SECOND = 10**9


class Clock:
    """Unix nanoseconds that move only when told to."""

    def __init__(self, now: int = 1_700_000_000 * SECOND):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * SECOND)


def peer_info(n: int = 1, **overrides) -> dict:
    """An IDENTIFY body like nsqd's."""
    return {"broadcast_address": f"nsqd{n}", "hostname": f"host{n}", "http_port": 4151 + 10 * n,
            "tcp_port": 4150 + 10 * n, "version": "1.3.0", **overrides}


class Peer(LoopbackConnection):
    """An nsqd as nsqlookupd sees it: a V1 connection on a real socket."""

    MAGIC = MAGIC_V1
    DAEMON = "nsqlookupd"

    def __init__(self, stream: trio.SocketStream):
        super().__init__(stream, ResponseReader())
        sockname = stream.socket.getsockname()
        self.address = f"{sockname[0]}:{sockname[1]}"  # nsqlookupd's id for this peer

    async def read(self, timeout: float = 5.0) -> bytes:
        with trio.fail_after(timeout):
            return await self.receive_until(self.reader.next_response)

    async def command(self, command) -> bytes:
        await self.send(command.to_bytes())
        return await self.read()

    async def identify(self, n: int = 1, **overrides) -> dict:
        return json.loads(await self.command(Identify(peer_info(n, **overrides))))

    async def register(self, topic: str, channel: str = "") -> None:
        assert await self.command(Register(topic, channel)) == b"OK"

    async def unregister(self, topic: str, channel: str = "") -> None:
        assert await self.command(Unregister(topic, channel)) == b"OK"

    async def ping(self) -> None:
        assert await self.command(Ping()) == b"OK"

    async def assert_closed(self, timeout: float = 5.0) -> None:
        """nsqlookupd closed the connection, after any replies still in flight."""
        with trio.fail_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return
                self.reader.receive_data(data)

    async def close(self) -> None:
        await self.stream.aclose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def start_lookupd(nursery, clock):
    """Start an in-process nsqlookupd on ephemeral loopback ports, with the ``clock`` fixture."""

    async def start(**overrides) -> NSQLookupd:
        overrides.setdefault("tcp_address", "127.0.0.1:0")
        overrides.setdefault("http_address", "127.0.0.1:0")
        lookupd = NSQLookupd(default_options(**overrides), clock=clock)
        await nursery.start(lookupd.run)
        return lookupd

    return start


@pytest.fixture
async def lookupd(start_lookupd) -> NSQLookupd:
    return await start_lookupd(broadcast_address="lookupd.test")


@pytest.fixture
async def http(lookupd):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{lookupd.http_port}") as client:
        yield client


class LookupdProcess(DaemonProcess):
    """A real ``python -m nsqlookupd`` on ephemeral loopback ports (tests/go_nsq.py has NSQ's)."""

    command: list[str] | None = None

    def __init__(self, *args: str):
        super().__init__("nsqlookupd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *args],
                         ("TCP", "HTTP"), self.command)
        self.tcp_port, self.http_port = self.ports["TCP"], self.ports["HTTP"]
