"""The HTTP client every Consumer on an event loop queries nsqlookupd with.

Building an ``httpx.AsyncClient`` takes ~20 ms (it loads the CA bundle into a TLS context).
Built by each consumer on the event loop, that stalled every connection on the loop for as
long, once per consumer: nsq_to_file over a topic pattern starts one consumer per topic. So
the first consumer on a loop builds the client in a worker thread, the others on that loop
share it (and its keep-alive connections to nsqlookupd), and the last one to stop closes it.
What differs between consumers (the Accept and Authorization headers, lookupd_poll_timeout)
goes with each request instead.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import httpx
from anyio.lowlevel import RunVar


class _Shared:
    """The loop's client while some consumer uses it."""

    def __init__(self):
        self.lock = anyio.Lock()
        self.client: httpx.AsyncClient | None = None
        self.users = 0


_per_loop: RunVar[_Shared] = RunVar("nsqclient_lookupd_http")


def _loop_shared() -> _Shared:
    try:
        return _per_loop.get()
    except LookupError:
        shared = _Shared()
        _per_loop.set(shared)
        return shared


@asynccontextmanager
async def lookupd_http_client() -> AsyncIterator[httpx.AsyncClient]:
    """The running loop's shared client, built off the loop if no one on it has one."""
    shared = _loop_shared()
    async with shared.lock:
        if shared.client is None:
            shared.client = await anyio.to_thread.run_sync(httpx.AsyncClient)
        shared.users += 1
        client = shared.client
    try:
        yield client
    finally:
        shared.users -= 1
        if shared.users == 0:
            shared.client = None
            with anyio.CancelScope(shield=True):
                await client.aclose()
