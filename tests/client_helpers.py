"""Helpers for the client library's tests: each test body runs under asyncio and under trio,
against real nsqd / nsqlookupd processes."""

import itertools
import json

import anyio
import httpx
import pytest

from .helpers import NsqdProcess
from .waiting import await_until as wait_for  # noqa: F401 (the name the client tests import)

BACKENDS = ("asyncio", "trio")
_names = itertools.count()


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def run(backend: str, body, *args, timeout: float = 15.0):
    """Run ``await body(*args)`` on a fresh event loop of ``backend``, bounded in time."""

    async def bounded():
        with anyio.fail_after(timeout):
            return await body(*args)

    return anyio.run(bounded, backend=backend)


def unique(prefix: str = "t") -> str:
    """A topic or channel name no other test uses."""
    return f"{prefix}{next(_names)}"


def start_nsqd(tmp_path_factory, *args: str) -> NsqdProcess:
    return NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", *args)


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    """One real nsqd for a whole test module (each test uses its own topics)."""
    proc = start_nsqd(tmp_path_factory)
    yield proc
    proc.stop()


def topic_stats(nsqd: NsqdProcess, topic: str) -> dict:
    """The topic's entry in nsqd's /stats (empty if nsqd does not have it)."""
    answer = httpx.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json&topic={topic}", timeout=5)
    topics = json.loads(answer.text)["topics"]
    return topics[0] if topics else {}


def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict:
    for stats in topic_stats(nsqd, topic).get("channels", []):
        if stats["channel_name"] == channel:
            return stats
    return {}
