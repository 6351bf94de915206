import pytest

from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .helpers import NsqdProcess


@pytest.fixture
async def start_nsqd(nursery):
    """Start an in-process nsqd on an ephemeral loopback port, with option overrides."""

    async def start(**overrides) -> NSQD:
        nsqd = NSQD(default_options(tcp_address="127.0.0.1:0", **overrides))
        await nursery.start(nsqd.run)
        return nsqd

    return start


@pytest.fixture
async def nsqd(start_nsqd) -> NSQD:
    return await start_nsqd()


@pytest.fixture
def nsqd_process():
    """A real nsqd process (for clients with their own event loop, such as pynsq)."""
    proc = NsqdProcess()
    yield proc
    proc.stop()
