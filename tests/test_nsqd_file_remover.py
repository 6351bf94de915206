"""Disk queue files removed by worker threads (nsqd/file_remover.py): the name is free at once,
the file goes soon after, and what a crash left renamed is removed at the next start. A deleted
topic's or channel's files are moved out of the way off the event loop, and nothing of that
name is made again before they are."""

import os
import threading

import httpx
import pytest
import trio

from nsqd.file_remover import SUFFIX, FileRemover

from .datadir import bodies, create_channel, drain, pub, publish, subscribe
from .helpers import RawClient
from .waiting import await_until


async def wait_until_gone(directory, names: set[str]) -> None:
    with trio.fail_after(30):  # a failure bound only
        while names & set(os.listdir(directory)):
            await trio.sleep(0.01)


async def test_a_removed_file_leaves_its_name_at_once_and_the_disk_soon(tmp_path):
    path = tmp_path / "t.diskqueue.000000.dat"
    path.write_bytes(b"x" * 4096)
    remover = FileRemover(str(tmp_path))
    remover.remove(str(path))
    assert not path.exists()
    path.write_bytes(b"new")  # a queue of the same name may write there at once
    [renamed] = [name for name in os.listdir(tmp_path) if name.endswith(SUFFIX)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(remover.run)
        await wait_until_gone(tmp_path, {renamed})
        nursery.cancel_scope.cancel()
    assert os.listdir(tmp_path) == [path.name] and path.read_bytes() == b"new"


async def test_what_a_crash_left_renamed_is_removed_at_the_start_and_nothing_else(tmp_path):
    left = tmp_path / f"t.diskqueue.000003.dat.123-0{SUFFIX}"
    left.write_bytes(b"old")
    (tmp_path / "nsqd.dat").write_bytes(b"{}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(FileRemover(str(tmp_path)).run)
        await wait_until_gone(tmp_path, {left.name})
        nursery.cancel_scope.cancel()
    assert os.listdir(tmp_path) == ["nsqd.dat"]


def test_removing_a_file_that_is_not_there_says_so(tmp_path):
    with pytest.raises(FileNotFoundError):
        FileRemover(str(tmp_path)).remove(str(tmp_path / "absent.dat"))


async def test_a_data_directory_gone_before_the_start_is_logged_not_fatal(tmp_path, caplog):
    remover = FileRemover(str(tmp_path / "gone"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(remover.run)
        with trio.fail_after(30):  # a failure bound only
            while "failed to look for files left to remove" not in caplog.text:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


def queue_file_names(directory, prefix: str, renamed: bool = False) -> list[str]:
    """The names beginning with ``prefix``; with ``renamed``, those renamed to be unlinked too."""
    return sorted(name for name in os.listdir(directory)
                  if name.startswith(prefix) and (renamed or not name.endswith(SUFFIX)))


async def post(nsqd, path: str, params: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=10) as http:
        answer = await http.post(path, params=params)
    assert answer.status_code == 200, answer.text


async def test_a_deletion_renames_and_removes_nothing_on_the_event_loop(start_nsqd, tmp_path, monkeypatch):
    """The request deleting a 1 GB topic made eleven renames and a removal on the loop, a step of
    milliseconds that every client waited for."""
    nsqd = await start_nsqd(data_path=str(tmp_path), mem_queue_size=0, max_bytes_per_file=200)
    for channel in ("a", "b"):
        await create_channel(nsqd.tcp_port, "t", channel)
    await publish(nsqd.tcp_port, "t", bodies("m", 14))
    await post(nsqd, "/topic/pause", {"topic": "t"})
    await publish(nsqd.tcp_port, "t", bodies("held", 14))  # in the paused topic's own queue
    await await_until(lambda: all(os.path.exists(tmp_path / f"{queue}.diskqueue.meta.dat") for queue in
                                  ("t", "t:a", "t:b")), what="the queues' metadata written")
    files = queue_file_names(tmp_path, "t")
    assert len(files) >= 9  # three queues: their data files and metadata
    loop_thread = threading.current_thread()
    on_loop, elsewhere = [], []
    for name in ("rename", "replace", "remove", "unlink"):
        original = getattr(os, name)

        def recorded(path, *args, original=original, **kwargs):
            (on_loop if threading.current_thread() is loop_thread else elsewhere).append(os.path.basename(path))
            return original(path, *args, **kwargs)
        monkeypatch.setattr(os, name, recorded)

    await post(nsqd, "/channel/delete", {"topic": "t", "channel": "a"})
    assert queue_file_names(tmp_path, "t:a.diskqueue") == []  # out of the way once answered
    await post(nsqd, "/topic/delete", {"topic": "t"})
    assert queue_file_names(tmp_path, "t.diskqueue") == queue_file_names(tmp_path, "t:b.diskqueue") == []
    await await_until(lambda: not queue_file_names(tmp_path, "t", renamed=True), what="the renamed files unlinked")
    assert on_loop == []
    assert set(files) <= set(elsewhere)


@pytest.fixture
def held_moves(monkeypatch) -> threading.Event:
    """The worker thread's moves wait until the event returned is set."""
    release = threading.Event()
    original = FileRemover._rename_all

    def held(self, moves):
        release.wait(30)  # a failure bound only
        return original(self, moves)
    monkeypatch.setattr(FileRemover, "_rename_all", held)
    return release


async def test_a_publish_racing_a_topic_deletion_waits_for_the_old_files_and_makes_a_new_topic(
        start_nsqd, tmp_path, held_moves):
    nsqd = await start_nsqd(data_path=str(tmp_path), mem_queue_size=0, max_bytes_per_file=200)
    await publish(nsqd.tcp_port, "t", bodies("old", 14))
    await await_until(lambda: os.path.exists(tmp_path / "t.diskqueue.meta.dat"), what="the metadata written")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(post, nsqd, "/topic/delete", {"topic": "t"})
        await await_until(lambda: nsqd.removing("t"), what="the deletion begun")
        publisher = await RawClient.connect(nsqd.tcp_port)
        await publisher.send(pub("t", b"new"))
        await publisher.assert_no_frame(within=0.2)  # its files are still there: no topic "t" yet
        assert "t" not in nsqd.topics and os.path.exists(tmp_path / "t.diskqueue.meta.dat")
        held_moves.set()
        assert await publisher.read_response() == b"OK"
    assert nsqd.topics["t"].depth == 1
    assert [message.body for message in await drain(nsqd.tcp_port, "t", "c", 1)] == [b"new"]


async def test_a_subscribe_racing_a_channel_deletion_waits_and_finds_an_empty_channel(
        start_nsqd, tmp_path, held_moves):
    nsqd = await start_nsqd(data_path=str(tmp_path), mem_queue_size=0, max_bytes_per_file=200)
    await create_channel(nsqd.tcp_port, "t", "c")
    await publish(nsqd.tcp_port, "t", bodies("old", 14))
    await await_until(lambda: os.path.exists(tmp_path / "t:c.diskqueue.meta.dat"), what="the metadata written")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(post, nsqd, "/channel/delete", {"topic": "t", "channel": "c"})
        await await_until(lambda: nsqd.removing("t", "c"), what="the deletion begun")
        consumer = await RawClient.connect(nsqd.tcp_port)
        await consumer.send(b"SUB t c\n")
        await consumer.assert_no_frame(within=0.2)
        assert "c" not in nsqd.topics["t"].channels
        held_moves.set()
        assert await consumer.read_response() == b"OK"
    assert nsqd.topics["t"].channels["c"].depth == 0
    await publish(nsqd.tcp_port, "t", [b"new"])
    await consumer.send(b"RDY 5\n")
    assert (await consumer.read_message()).body == b"new"
    await consumer.assert_no_frame(within=0.2)
