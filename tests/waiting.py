"""Waiting for a condition, never for a time: the one copy every test module and helper uses.

A test that needs something to have happened (a log line, a /stats count, a file on disk, a
registration) polls for it; the timeout is only a failure bound, generous enough for a loaded
2-core machine, and a met condition returns at once. ``wait_until`` blocks (threads, subprocess
tests); ``await_until`` is its async twin, for trio and asyncio alike (anyio picks the loop).
A sleep left in a test is a deliberate pause the test is about, and says so in a comment.
"""

import inspect
import time

import anyio


def wait_until(predicate, timeout: float = 10.0, what: str = "condition", interval: float = 0.02):
    """Poll ``predicate`` until it returns something true, and return that; AssertionError (naming
    ``what`` and the last value) if it has not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {result!r})")
        time.sleep(interval)


async def await_until(predicate, timeout: float = 10.0, what: str = "condition", interval: float = 0.01):
    """``wait_until`` on the running event loop (the loop goes on serving between polls); the
    predicate may be async."""
    deadline = anyio.current_time() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if anyio.current_time() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {result!r})")
        await anyio.sleep(interval)
