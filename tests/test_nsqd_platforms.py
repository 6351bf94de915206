"""nsqd beyond Linux: which I/O backend serves a connection (nsqd/io_backend.py), nsqd where
select has no epoll, and the fallbacks NSQ has where fcntl or os.O_DIRECTORY do not exist."""

import os
import select
import struct
import subprocess
import sys

import pytest
import trio

from nsqd import diskqueue, dirlock, stats
from nsqd.stream_backend import StreamBackend

from .helpers import ROOT, NsqdProcess, RawClient

# Run before nsqd is imported (a sitecustomize on PYTHONPATH): the process's `select` module
# has no epoll, as on macOS or Windows. trio is imported first and keeps the real module for its
# own run loop (on macOS it uses kqueue); everything imported after sees no epoll.
NO_EPOLL = """\
import sys, types
import select as real_select
import trio

stripped = types.ModuleType("select", real_select.__doc__)
for name in dir(real_select):
    if not name.lower().startswith("epoll"):
        setattr(stripped, name, getattr(real_select, name))
sys.modules["select"] = stripped
"""


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


async def test_nsqd_starts_and_serves_where_select_has_no_epoll(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_EPOLL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    data = tmp_path / "data"
    data.mkdir()
    proc = NsqdProcess(f"--data-path={data}", env=env)
    try:
        consumer = await RawClient.connect(proc.tcp_port)
        await consumer.sub("t", "c", rdy=1)
        producer = await RawClient.connect(proc.tcp_port)
        await producer.send(pub("t", b"no epoll"))
        assert await producer.read_response() == b"OK"
        assert (await consumer.read_message()).body == b"no epoll"
    finally:
        assert proc.stop() == 0
    assert "TCP: I/O backend portable (trio streams: no select.epoll on this platform)" in proc.log()


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="the fast path needs select.epoll (Linux)")
@pytest.mark.parametrize(("flag", "logged"), [
    ([], "TCP: I/O backend epoll (edge-triggered epoll and direct writes; TLS and compression on trio streams)"),
    (["--io-backend=portable"], "TCP: I/O backend portable (trio streams)\n"),
])
def test_the_log_says_which_backend_serves_connections(tmp_path, monkeypatch, flag, logged):
    monkeypatch.setattr(NsqdProcess, "io_backend", "")  # the default, whatever NSQD_IO_BACKEND says
    proc = NsqdProcess(f"--data-path={tmp_path}", *flag)
    assert proc.stop() == 0
    assert logged in proc.log()


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="the fast path needs select.epoll (Linux)")
async def test_a_connection_that_upgrades_moves_to_the_portable_backend(start_nsqd):
    nsqd = await start_nsqd(io_backend="auto")
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"NOP\n")
    with trio.fail_after(5):
        while not nsqd.connections:
            await trio.sleep(0.01)
    (connection,) = nsqd.connections
    assert type(connection.backend).__name__ == "EpollBackend"
    answer = await client.identify(feature_negotiation=True, deflate=True)
    assert answer["deflate"] is True
    with trio.fail_after(5):  # once the answer has gone, in the clear
        while type(connection.backend) is not StreamBackend:
            await trio.sleep(0.01)


def test_the_data_directory_lock_is_a_no_op_without_fcntl(tmp_path, monkeypatch):
    """NSQ's internal/dirlock does nothing on Windows."""
    monkeypatch.setattr(dirlock, "fcntl", None)
    first, second = dirlock.DirLock(str(tmp_path)), dirlock.DirLock(str(tmp_path))
    first.acquire()
    second.acquire()
    first.release()
    second.release()


def test_the_data_directory_lock_holds_where_there_is_fcntl(tmp_path):
    first, second = dirlock.DirLock(str(tmp_path)), dirlock.DirLock(str(tmp_path))
    first.acquire()
    with pytest.raises(dirlock.DirLockError, match="in use"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_directories_are_not_fsynced_where_they_cannot_be_opened(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fsync", synced.append)
    diskqueue.fsync_directory(str(tmp_path))
    assert len(synced) == 1
    monkeypatch.delattr(os, "O_DIRECTORY")
    diskqueue.fsync_directory(str(tmp_path))
    assert len(synced) == 1


def test_memory_stats_without_proc(monkeypatch):
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    peak = stats.memory_stats(stats.GCPauses())["heap_in_use_bytes"]
    assert 1024 * 1024 < peak < 64 * 1024 ** 3
    monkeypatch.setattr(stats, "resource", None)
    assert stats.memory_stats(stats.GCPauses())["heap_in_use_bytes"] == 0


def test_nothing_imports_the_fast_path_where_there_is_no_epoll(tmp_path):
    """nsqd's modules import without select.epoll; only the fast path's needs it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_EPOLL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    code = ("import sys, nsqd.main, nsqd.nsqd; "
            "assert 'nsqd.epoll_backend' not in sys.modules; "
            "import nsqd.epoll_backend")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert "AttributeError" in result.stderr and "EPOLLIN" in result.stderr, result.stderr
