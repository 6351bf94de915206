"""go-diskqueue compatible files: byte layout, roll-over, restart, corruption, emptying."""

import os
import struct

from nsqd.diskqueue import DiskQueue

MIN, MAX = 26, 1024 * 1024 + 26


def payload(i: int, size: int = 40) -> bytes:
    return (b"%08d" % i).ljust(size, b"x")


def make(path, name="t", max_bytes=1024) -> DiskQueue:
    return DiskQueue(name, str(path), max_bytes, MIN, MAX)


def test_records_and_metadata_are_byte_exact(tmp_path):
    dq = make(tmp_path, "orders")
    dq.put([payload(1), payload(2)])
    dq.sync()
    data = (tmp_path / "orders.diskqueue.000000.dat").read_bytes()
    assert data == struct.pack(">i", 40) + payload(1) + struct.pack(">i", 40) + payload(2)
    assert (tmp_path / "orders.diskqueue.meta.dat").read_text() == "2\n0,0\n0,88\n"


def test_rolls_files_at_max_bytes_and_deletes_read_files(tmp_path):
    dq = make(tmp_path, max_bytes=100)  # two 44-byte records per file
    dq.put([payload(i) for i in range(5)])
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".dat") and "meta" not in p.name)
    assert names == ["t.diskqueue.000000.dat", "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"]
    assert [os.path.getsize(tmp_path / n) for n in names] == [88, 88, 44]
    assert dq.read(3) == [payload(0), payload(1), payload(2)]
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()
    assert dq.depth == 2
    assert dq.read(10) == [payload(3), payload(4)]
    assert dq.depth == 0 and not dq.has_data()


def test_restart_resumes_where_metadata_says(tmp_path):
    dq = make(tmp_path, max_bytes=100)
    dq.put([payload(i) for i in range(5)])
    assert dq.read(1) == [payload(0)]
    dq.close()
    again = make(tmp_path, max_bytes=100)
    assert again.depth == 4
    assert again.read(10) == [payload(i) for i in range(1, 5)]


def test_unclean_stop_writes_into_a_new_file(tmp_path):
    dq = make(tmp_path, max_bytes=10_000)
    dq.put([payload(0)])
    dq.sync()
    dq.put([payload(1)])  # written but never synced: metadata says writePos 44, file has 88
    again = make(tmp_path, max_bytes=10_000)
    assert (again.write_file_num, again.write_pos) == (1, 0)
    again.put([payload(2)])
    assert again.read(10) == [payload(0), payload(1), payload(2)]


def test_an_unclean_stop_tells_which_records_to_be_read_came_after_the_metadata(tmp_path):
    dq = make(tmp_path, max_bytes=10_000)
    dq.put([payload(0)])
    dq.sync()
    dq.put([payload(i) for i in range(1, 5)])  # never synced
    again = make(tmp_path, max_bytes=10_000)
    assert again.unread_unclean_records() == [payload(i) for i in range(1, 5)]
    assert again.read(3) == [payload(0), payload(1), payload(2)]
    assert again.unread_unclean_records() == [payload(3), payload(4)]  # from the read position on
    assert again.read(2) == [payload(3), payload(4)]
    assert again.unread_unclean_records() == []
    again.put([payload(5)])
    again.sync()  # a clean stop: none
    assert make(tmp_path, max_bytes=10_000).unread_unclean_records() == []


def test_corrupt_file_is_renamed_bad_and_skipped(tmp_path):
    dq = make(tmp_path, max_bytes=100)
    dq.put([payload(i) for i in range(4)])
    dq.close()
    with open(tmp_path / "t.diskqueue.000000.dat", "r+b") as handle:
        handle.write(struct.pack(">i", 5))  # below the minimum message size
    again = make(tmp_path, max_bytes=100)
    assert again.read(10) == [payload(2), payload(3)]
    assert (tmp_path / "t.diskqueue.000000.dat.bad").exists()


def test_empty_removes_files_and_continues_in_a_new_file(tmp_path):
    dq = make(tmp_path, max_bytes=100)
    dq.put([payload(i) for i in range(3)])
    dq.empty()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("t.diskqueue.0")]
    assert dq.depth == 0 and not dq.has_data()
    dq.put([payload(9)])
    assert dq.read(5) == [payload(9)]


def test_reads_files_written_with_a_different_roll_size(tmp_path):
    make(tmp_path, max_bytes=100).put([payload(i) for i in range(5)])
    bigger = make(tmp_path, max_bytes=10_000)
    bigger.read_file_num, bigger.write_file_num, bigger.write_pos, bigger.depth = 0, 2, 44, 5
    assert bigger.read(10) == [payload(i) for i in range(5)]


def test_peek_shows_the_next_record_without_taking_it(tmp_path):
    dq = make(tmp_path, max_bytes=100)  # two records per file: a peek at the last of a file keeps the file
    dq.put([payload(i) for i in range(3)])
    assert dq.read(1) == [payload(0)]
    assert dq.peek() == dq.peek() == payload(1)
    assert (dq.depth, (tmp_path / "t.diskqueue.000000.dat").exists()) == (2, True)
    assert dq.read(1) == [payload(1)]
    assert not (tmp_path / "t.diskqueue.000000.dat").exists()
    assert dq.peek() == payload(2)
    assert dq.read(5) == [payload(2)]
    assert dq.peek() is None


def test_a_reader_that_caught_up_reads_the_rest_of_its_file_after_a_roll(tmp_path):
    """The file being read was the write file; more was written to it, then the writer rolled:
    the reader still reads the file to its end (go-diskqueue's maxBytesPerFileRead = writePos
    at the roll), where it stopped at the size it had seen and lost the rest."""
    dq = make(tmp_path, max_bytes=200)  # four 44-byte records per file
    dq.put([payload(0), payload(1)])
    assert dq.read(10) == [payload(0), payload(1)]
    dq.put([payload(i) for i in range(2, 12)])
    assert dq.read(100) == [payload(i) for i in range(2, 12)]
    assert dq.depth == 0 and not dq.has_data()


def write_files(path, name: str, numbers, per_file: int = 2) -> list[bytes]:
    """Data files ``numbers`` of queue ``name``, ``per_file`` records each; the payloads in order."""
    written = []
    for number in numbers:
        records = [payload(number * 10 + i) for i in range(per_file)]
        (path / f"{name}.diskqueue.{number:06d}.dat").write_bytes(b"".join(struct.pack(">i", 40) + r for r in records))
        written += records
    return written


def test_garbage_metadata_reads_every_data_file_of_the_queue(tmp_path):
    """README, Deliberate differences (Data directories): go-diskqueue starts empty at file 0."""
    for number, garbage in enumerate([b"garbage\n", b"", b"\x00\x01\xff\xfe", b"3\n0,x\n", b"9\n0,0\n"]):
        name = f"q{number}"
        wanted = write_files(tmp_path, name, [4, 5, 7])  # numbered as after some were read; 6 is missing
        write_files(tmp_path, name + ".diskqueue.000009", [0])  # another queue's files are not taken
        write_files(tmp_path, name + "x", [4])
        (tmp_path / f"{name}.diskqueue.meta.dat").write_bytes(garbage)
        dq = make(tmp_path, name)
        assert dq.depth == 6, garbage
        dq.put([payload(99)])
        assert (tmp_path / f"{name}.diskqueue.000008.dat").exists()  # written after the last, over none
        assert dq.read(100) == wanted + [payload(99)], garbage
        assert dq.depth == 0
        assert (tmp_path / f"{name}.diskqueue.000009.diskqueue.000000.dat").exists()
        assert (tmp_path / f"{name}x.diskqueue.000004.dat").exists()


def test_garbage_metadata_and_no_data_files_start_empty(tmp_path):
    (tmp_path / "t.diskqueue.meta.dat").write_bytes(b"\xff")
    dq = make(tmp_path)
    assert (dq.depth, dq.read_position(), dq.end_position()) == (0, (0, 0), (0, 0))
    dq.put([payload(1)])
    assert dq.read(10) == [payload(1)]
