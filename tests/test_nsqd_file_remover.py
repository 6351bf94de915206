"""Disk queue files removed by a worker thread (nsqd/file_remover.py): the name is free at once,
the file goes soon after, and what a crash left renamed is removed at the next start."""

import os

import pytest
import trio

from nsqd.file_remover import SUFFIX, FileRemover


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
