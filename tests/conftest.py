import pytest

from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .helpers import NsqdProcess


@pytest.fixture
async def start_nsqd(nursery, tmp_path_factory):
    """Start an in-process nsqd on ephemeral loopback ports, in a fresh data directory."""

    async def start(**overrides) -> NSQD:
        overrides.setdefault("data_path", str(tmp_path_factory.mktemp("nsqd")))
        overrides.setdefault("http_address", "127.0.0.1:0")
        nsqd = NSQD(default_options(tcp_address="127.0.0.1:0", **overrides))
        await nursery.start(nsqd.run)
        return nsqd

    return start


@pytest.fixture
async def nsqd(start_nsqd) -> NSQD:
    return await start_nsqd()


@pytest.fixture
def nsqd_process(tmp_path):
    """A real nsqd process (for clients with their own event loop, such as pynsq)."""
    proc = NsqdProcess(f"--data-path={tmp_path}")
    yield proc
    proc.stop()
