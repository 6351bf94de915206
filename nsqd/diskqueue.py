"""A file-backed FIFO in go-diskqueue v1.1.0's on-disk format, so NSQ's data directories work.

Layout in ``data_path`` for a queue NAME:

* ``NAME.diskqueue.000000.dat``, ``...000001.dat``: records ``[int32 BE length][payload]``.
  A file is complete once a later file exists; it ends at its size. A write that would take
  a non-empty file past ``max_bytes_per_file`` starts the next file first.
* ``NAME.diskqueue.meta.dat``: ``"depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n"``,
  replaced atomically (temp file, fsync, rename).

Reading a record consumes it (go-diskqueue's moveForward); a fully read file is deleted.
A corrupt record (length out of range, short read) renames its file to ``.bad`` and
skips to the next file. If the write file is longer than the metadata says, or there is no
metadata yet (an unclean stop), its records are read to its end and writing resumes in a
new file, so no half-written record is appended to. Metadata that cannot be read (garbage:
go-diskqueue then starts empty at file 0 and writes over what is there) makes every data
file of the queue be read, lowest number first, and writing resume after the last.

All file operations here are synchronous and short: one write() per put batch and
buffered reads. fsync (the slow part) happens in ``sync()``, which the owner may run in
a worker thread on a snapshot (``prepare_sync``), so the event loop never waits for it.
"""

import logging
import os
import random
import re
import struct
import threading

log = logging.getLogger("nsqd")

_LENGTH = struct.Struct(">i")
READ_CHUNK = 256 * 1024


class SyncJob:
    """One sync, in two steps: ``flush`` fsyncs the data files (fds it owns and closes) and,
    after a data file was created, the directory that names it: the records written before
    the snapshot are then durable. ``write_metadata`` writes the snapshot's metadata, unless
    the queue's files were removed since (Empty, delete): metadata written back then would
    point a re-created queue at files that are gone."""

    def __init__(self, queue: "DiskQueue", fds: list[int], meta_text: str, new_file: bool):
        self.queue = queue
        self.fds = fds
        self.meta_text = meta_text
        self.new_file = new_file
        self.generation = queue.generation

    def run(self) -> None:
        self.flush()
        self.write_metadata()

    def flush(self) -> None:
        try:
            for fd in self.fds:
                os.fsync(fd)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []
        if self.new_file:
            fsync_directory(self.queue.data_path)

    def write_metadata(self) -> None:
        with self.queue.meta_lock:
            if self.queue.generation == self.generation:
                write_atomically(self.queue.meta_file_name(), self.meta_text.encode())


def fsync_directory(path: str) -> None:
    """Make the directory's entries durable (a new file is not, by its own fsync alone).
    Where os.O_DIRECTORY does not exist (Windows) a directory cannot be opened to fsync
    it, and nothing is done, as go-diskqueue does nothing anywhere."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, fsync: bool = True) -> None:
    """Temp file, (fsync,) rename: the file is either the old or the new content."""
    tmp = f"{path}.{random.getrandbits(63)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class DiskQueue:
    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int, max_msg_size: int,
                 keep_read_files: bool = False, remove_file=os.remove):
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.min_msg_size = min_msg_size
        self.max_msg_size = max_msg_size
        self.depth = 0
        self.read_file_num = 0
        self.read_pos = 0
        self.write_file_num = 0
        self.write_pos = 0
        self.writes_since_sync = 0
        self._write_fd: int | None = None
        self._unsynced_fds: list[int] = []  # finished data files not fsynced yet
        self._new_file = False  # a data file was created since the last sync
        self._read_fd: int | None = None
        self._read_buf = b""
        self._read_buf_pos = 0
        self._read_end = 0  # where the file being read ends (its size, or write_pos)
        self.meta_lock = threading.Lock()
        self.generation = 0  # bumped by empty() (under meta_lock) and delete()
        # Beyond NSQ (--persist-deferred with --mem-queue-size=0): a file read to its end is
        # removed only at the next read or sync, once what was read from it is recorded elsewhere.
        self.keep_read_files = keep_read_files
        self._read_files_done: list[str] = []
        self.remove_file = remove_file  # nsqd's removes in a worker thread (nsqd/file_remover.py)
        # (file number, start, end) of the records an unclean stop left beyond the metadata
        self.unclean_tail: list[tuple[int, int, int]] = []
        self._load_metadata()

    # -- naming ------------------------------------------------------------------

    def file_name(self, number: int) -> str:
        return os.path.join(self.data_path, f"{self.name}.diskqueue.{number:06d}.dat")

    def meta_file_name(self) -> str:
        return os.path.join(self.data_path, f"{self.name}.diskqueue.meta.dat")

    # -- metadata ----------------------------------------------------------------

    def _load_metadata(self) -> None:
        try:
            with open(self.meta_file_name(), "rb") as handle:
                content = handle.read()
        except FileNotFoundError:
            pass  # a new queue, or one killed before its first sync: its data file is checked below
        else:
            if not self._parse_metadata(content):
                self._recover_every_file()
        self._skip_unclean_write_file()

    def _parse_metadata(self, content: bytes) -> bool:
        """Take the positions of ``depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n``; False if
        they cannot be read (nothing taken)."""
        try:
            depth, read_part, write_part = content.decode("ascii").split("\n")[:3]
            read_num, read_pos = read_part.split(",")
            write_num, write_pos = write_part.split(",")
            numbers = [int(depth), int(read_num), int(read_pos), int(write_num), int(write_pos)]
        except ValueError:  # UnicodeDecodeError is one
            log.error("DISKQUEUE(%s) failed to read metadata %r, reading every data file", self.name, content[:100])
            return False
        self.depth, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos = numbers
        return True

    def _recover_every_file(self) -> None:
        """Unreadable metadata: read every data file of the queue from its start, lowest number
        first (what was read of the first comes again), and write after the last. go-diskqueue
        starts empty at file 0 instead, and loses them (README, Deliberate differences)."""
        numbers = self._data_file_numbers()
        if not numbers:
            return
        for number in numbers:
            name = self.file_name(number)
            self.depth += self._count_records(name, 0, os.path.getsize(name))[0]
        self.read_file_num = numbers[0]
        self.write_file_num = numbers[-1] + 1
        log.warning("DISKQUEUE(%s) reading data files %d to %d (%d records) from their start, writing to a new file",
                    self.name, numbers[0], numbers[-1], self.depth)

    def _data_file_numbers(self) -> list[int]:
        """The numbers of the queue's data files in the directory, in order."""
        pattern = re.compile(re.escape(self.name) + r"\.diskqueue\.(\d{6,})\.dat")
        numbers = []
        with os.scandir(self.data_path) as entries:
            for entry in entries:
                match = pattern.fullmatch(entry.name)
                if match and entry.path == self.file_name(int(match.group(1))) and entry.is_file():
                    numbers.append(int(match.group(1)))
        return sorted(numbers)

    def _skip_unclean_write_file(self) -> None:
        """Never write over records the metadata does not know of (an unclean stop): they
        are read to their file's end, and writing resumes in a new file. The loop covers
        metadata older than the last roll (a roll's metadata is not fsynced, and a sync may
        write an older snapshot after it): writing resumes after the last file there is.
        A write file that is gone was read to its end and removed before the metadata said
        so: writing there would leave a hole of zeros before the record, which reads as a
        corrupt file (go-diskqueue v1.1.0 does that), so it resumes in a new file too."""
        while True:
            name = self.file_name(self.write_file_num)
            try:
                size = os.path.getsize(name)
            except FileNotFoundError:
                size = None
            later = os.path.exists(self.file_name(self.write_file_num + 1))
            if size is not None and self.write_pos < size:
                log.warning("DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new file",
                            self.name, name, self.write_pos, size)
                count, end = self._count_records(name, self.write_pos, size)
                self.depth += count
                self.unclean_tail.append((self.write_file_num, self.write_pos, end))
            elif later or (size is None and self.write_pos > 0):
                log.warning("DISKQUEUE(%s) metadata writeFileNum %d is older than the files, skipping to new file",
                            self.name, self.write_file_num)
            else:
                break
            self.write_file_num += 1
            self.write_pos = 0
        while self.read_file_num < self.write_file_num and not os.path.exists(self.file_name(self.read_file_num)):
            self.read_file_num += 1  # read to its end and removed before the metadata said so
            self.read_pos = 0
        self._check_tail()

    def _count_records(self, name: str, start: int, end: int) -> tuple[int, int]:
        """Records written after the metadata was (an unclean stop): the depth counts them, as
        it counts what is read of them (go-diskqueue's depth goes below zero until the tail).
        How many, and where the last ends."""
        count = 0
        with open(name, "rb") as handle:
            while start + 4 <= end:
                handle.seek(start)
                size = _LENGTH.unpack(handle.read(4))[0]
                if not self.min_msg_size <= size <= self.max_msg_size or start + 4 + size > end:
                    break
                start += 4 + size
                count += 1
        return count, start

    def unread_unclean_records(self) -> list[bytes]:
        """The records an unclean stop left beyond the metadata (written since its last sync)
        that are still to be read, at the start (nsqd/deferred_store.py: a copy of a message
        there is not made a second time from another record)."""
        records = []
        for number, start, end in self.unclean_tail:
            if (number, end) <= self.read_position():
                continue
            if number == self.read_file_num:
                start = max(start, self.read_pos)
            with open(self.file_name(number), "rb") as handle:
                handle.seek(start)
                data = handle.read(end - start)
            offset = 0
            while offset < len(data):  # whole records, as counted at the start
                size = _LENGTH.unpack_from(data, offset)[0]
                records.append(data[offset + 4:offset + 4 + size])
                offset += 4 + size
        return records

    def metadata_text(self) -> str:
        return f"{self.depth}\n{self.read_file_num},{self.read_pos}\n{self.write_file_num},{self.write_pos}\n"

    def prepare_sync(self) -> SyncJob:
        """A snapshot to sync, safe to run in another thread while this queue goes on."""
        if self._read_files_done:
            self._remove_read_files()
        self.writes_since_sync = 0
        fds, self._unsynced_fds = self._unsynced_fds, []
        if self._write_fd is not None:
            fds.append(os.dup(self._write_fd))
        new_file, self._new_file = self._new_file, False
        return SyncJob(self, fds, self.metadata_text(), new_file)

    def sync(self) -> None:
        self.prepare_sync().run()

    # -- writing -----------------------------------------------------------------

    def put(self, payloads: list[bytes]) -> None:
        """Append records; raises OSError (nothing half-counted) if the disk refuses."""
        batch: list[bytes] = []
        batch_bytes = 0
        for payload in payloads:
            size = len(payload)
            if not self.min_msg_size <= size <= self.max_msg_size:
                raise ValueError(f"invalid message write size ({size}) minMsgSize={self.min_msg_size} "
                                 f"maxMsgSize={self.max_msg_size}")
            total = 4 + size
            if self.write_pos + batch_bytes > 0 and self.write_pos + batch_bytes + total > self.max_bytes_per_file:
                self._write_batch(batch, batch_bytes)
                batch, batch_bytes = [], 0
                if self.write_pos > 0:
                    self._roll_write_file()
            batch.append(_LENGTH.pack(size))
            batch.append(payload)
            batch_bytes += total
        self._write_batch(batch, batch_bytes)

    def _write_batch(self, parts: list[bytes], size: int) -> None:
        if not parts:
            return
        fd = self._open_write_file()
        data = b"".join(parts)
        try:
            written = os.write(fd, data)
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            self._abandon_partial_write()
            raise
        self.write_pos += size
        self.depth += len(parts) // 2
        self.writes_since_sync += len(parts) // 2

    def _abandon_partial_write(self) -> None:
        """After a failed write, drop whatever part of it reached the file."""
        try:
            os.ftruncate(self._write_fd, self.write_pos)
            os.lseek(self._write_fd, self.write_pos, os.SEEK_SET)
        except OSError:
            os.close(self._write_fd)
            self._write_fd = None
            self._next_write_file()

    def _open_write_file(self) -> int:
        if self._write_fd is None:
            fd = os.open(self.file_name(self.write_file_num), os.O_WRONLY | os.O_CREAT, 0o600)
            os.lseek(fd, self.write_pos, os.SEEK_SET)
            self._write_fd = fd
            if self.write_pos == 0:
                self._new_file = True
        return self._write_fd

    def _roll_write_file(self) -> None:
        """Start the next data file. The finished one is fsynced by the next sync job; the
        metadata is rewritten now (without fsync) so a restart after a crash resumes in the
        new file instead of writing over it."""
        if self._write_fd is not None:
            self._unsynced_fds.append(self._write_fd)
            self._write_fd = None
        self._next_write_file()
        write_atomically(self.meta_file_name(), self.metadata_text().encode(), fsync=False)

    def _next_write_file(self) -> None:
        """Writing moves on to the next file. A reader in the one it leaves reads that to where
        writing stopped (go-diskqueue's maxBytesPerFileRead), not to where it stood when the
        reader last looked."""
        if self.read_file_num == self.write_file_num:
            self._read_end = self.write_pos
        self.write_file_num += 1
        self.write_pos = 0

    # -- reading -----------------------------------------------------------------

    def has_data(self) -> bool:
        return self.read_file_num < self.write_file_num or self.read_pos < self.write_pos

    def read_position(self) -> tuple[int, int]:
        return self.read_file_num, self.read_pos

    def end_position(self) -> tuple[int, int]:
        return self.write_file_num, self.write_pos

    def skip_to(self, position: tuple[int, int]) -> int:
        """Beyond NSQ (--persist-deferred): drop the records before ``position``, a read position
        recorded beside the queue after the metadata was last written (nsqd/deferred_store.py),
        so what was read and handed on before a crash is not read again; how many. A file
        read to its end may be gone already: it is passed over."""
        skipped = 0
        while self.has_data() and self.read_position() < position:
            if self.read_file_num < min(position[0], self.write_file_num) and \
                    not os.path.exists(self.file_name(self.read_file_num)):
                self._close_read_file()
                self.read_file_num += 1
                self.read_pos = 0
            elif self._read_one() is not None:
                skipped += 1
        self.writes_since_sync += skipped
        self._check_tail()
        return skipped

    def read(self, max_count: int) -> list[bytes]:
        """Take up to ``max_count`` records off the front (they leave the queue)."""
        if self._read_files_done:
            self._remove_read_files()
        out: list[bytes] = []
        while len(out) < max_count and self.has_data():
            if self._read_fd is not None and self._take_buffered(out, max_count):
                continue
            payload = self._read_one()
            if payload is not None:
                out.append(payload)
        self.writes_since_sync += len(out)
        return out

    def _take_buffered(self, out: list[bytes], max_count: int) -> int:
        """Append the records already in the read buffer, up to the read file's end, without
        another read; how many. Anything unusual (a record cut by the buffer, a bad length)
        is left to ``_read_one``."""
        buf, pos, read_pos = self._read_buf, self._read_buf_pos, self.read_pos
        limit = self.write_pos if self.read_file_num == self.write_file_num else self._read_end
        smallest, largest, unpack = self.min_msg_size, self.max_msg_size, _LENGTH.unpack_from
        available, wanted, taken = len(buf), max_count - len(out), 0
        while taken < wanted and available - pos >= 4:
            size = unpack(buf, pos)[0]
            end = pos + 4 + size
            if not smallest <= size <= largest or end > available or read_pos + 4 + size > limit:
                break
            out.append(buf[pos + 4:end])
            pos = end
            read_pos += 4 + size
            taken += 1
        if taken:
            self._read_buf_pos, self.read_pos = pos, read_pos
            self.depth -= taken
            if self.read_file_num < self.write_file_num and read_pos >= self._read_end:
                self._finish_read_file()
            self._check_tail()
        return taken

    def _read_one(self) -> bytes | None:
        try:
            self._open_read_file()
            size = _LENGTH.unpack(self._read_exactly(4))[0]
            if not self.min_msg_size <= size <= self.max_msg_size:
                raise ValueError(f"invalid message read size ({size})")
            payload = self._read_exactly(size)
        except (OSError, ValueError, EOFError) as exc:
            log.error("DISKQUEUE(%s) reading at %d of %s - %s", self.name, self.read_pos,
                      self.file_name(self.read_file_num), exc)
            self._skip_bad_file()
            return None
        self.read_pos += 4 + size
        self.depth -= 1
        if self.read_file_num < self.write_file_num and self.read_pos >= self._read_end:
            self._finish_read_file()
        self._check_tail()
        return payload

    def _open_read_file(self) -> None:
        if self._read_fd is not None:
            if self.read_file_num == self.write_file_num:
                self._read_end = self.write_pos
            return
        fd = os.open(self.file_name(self.read_file_num), os.O_RDONLY)
        os.lseek(fd, self.read_pos, os.SEEK_SET)
        self._read_fd = fd
        self._read_buf, self._read_buf_pos = b"", 0
        if self.read_file_num < self.write_file_num:
            self._read_end = os.fstat(fd).st_size
        else:
            self._read_end = self.write_pos

    def _read_exactly(self, count: int) -> bytes:
        self._buffer(count)
        start = self._read_buf_pos
        self._read_buf_pos = start + count
        return self._read_buf[start:start + count]

    def _buffer(self, count: int) -> None:
        """At least ``count`` unread bytes in the read buffer (EOFError if the file has fewer)."""
        available = len(self._read_buf) - self._read_buf_pos
        if available < count:
            chunk = os.read(self._read_fd, max(READ_CHUNK, count - available))
            self._read_buf = self._read_buf[self._read_buf_pos:] + chunk
            self._read_buf_pos = 0
            if len(self._read_buf) < count:
                raise EOFError(f"short read: wanted {count} bytes, file has {len(self._read_buf)}")

    def peek(self) -> bytes | None:
        """The next record without taking it; None at the end, or if it cannot be read
        (``read`` then deals with it as go-diskqueue would)."""
        if not self.has_data():
            return None
        try:
            self._open_read_file()
            self._buffer(4)
            size = _LENGTH.unpack_from(self._read_buf, self._read_buf_pos)[0]
            if not self.min_msg_size <= size <= self.max_msg_size:
                return None
            self._buffer(4 + size)
        except (OSError, EOFError):
            return None
        start = self._read_buf_pos + 4
        return self._read_buf[start:start + size]

    def _close_read_file(self) -> None:
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        self._read_buf, self._read_buf_pos = b"", 0

    def _finish_read_file(self) -> None:
        """The read file is done: delete it (with ``keep_read_files``, at the next read or
        sync) and move on."""
        self._close_read_file()
        finished = self.file_name(self.read_file_num)
        self.read_file_num += 1
        self.read_pos = 0
        self._read_files_done.append(finished)
        if not self.keep_read_files:
            self._remove_read_files()

    def _remove_read_files(self) -> None:
        for finished in self._read_files_done:
            try:
                self.remove_file(finished)
            except OSError as exc:
                log.error("DISKQUEUE(%s) failed to Remove(%s) - %s", self.name, finished, exc)
        self._read_files_done.clear()

    def _skip_bad_file(self) -> None:
        self._close_read_file()
        if self.read_file_num == self.write_file_num:
            self._close_write_file()
            self.write_file_num += 1
            self.write_pos = 0
        bad = self.file_name(self.read_file_num)
        log.warning("DISKQUEUE(%s) jump to next file and saving bad file as %s.bad", self.name, bad)
        try:
            os.replace(bad, bad + ".bad")
        except OSError as exc:
            log.error("DISKQUEUE(%s) failed to rename bad diskqueue file %s - %s", self.name, bad, exc)
        self.read_file_num += 1
        self.read_pos = 0
        self._check_tail()

    def _check_tail(self) -> None:
        """At the end of the queue the depth must be 0 (go-diskqueue's checkTailCorruption)."""
        if self.has_data():
            return
        if self.depth != 0:
            log.error("DISKQUEUE(%s) %s depth at tail (%d), resetting 0...", self.name,
                      "negative" if self.depth < 0 else "positive", self.depth)
            self.depth = 0
        if self.read_file_num > self.write_file_num or self.read_pos > self.write_pos:
            log.error("DISKQUEUE(%s) read position past write position, skipping to next file", self.name)
            self._skip_to_next_file()

    # -- whole-queue operations ------------------------------------------------------

    def _close_write_file(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def _skip_to_next_file(self) -> None:
        """Delete every data file and continue in a fresh file number (go-diskqueue Empty)."""
        self._remove_read_files()
        for path in self._let_go_of_data_files():
            try:
                self.remove_file(path)
            except FileNotFoundError:
                pass

    def _let_go_of_data_files(self) -> list[str]:
        """Close the files and continue, empty, in a fresh file number; the data files left behind."""
        self._close_read_file()
        self._close_write_file()
        self._drop_unsynced()
        left = [self.file_name(number) for number in range(self.read_file_num, self.write_file_num + 1)]
        self.write_file_num += 1
        self.write_pos = 0
        self.read_file_num, self.read_pos = self.write_file_num, 0
        self.depth = 0
        return left

    def empty(self) -> None:
        with self.meta_lock:
            self.generation += 1
            self._skip_to_next_file()
            try:
                os.remove(self.meta_file_name())
            except FileNotFoundError:
                pass

    def delete(self) -> list[str]:
        """The topic or channel is deleted: let go of the queue's files and return their paths, data
        files first and the metadata last (go-diskqueue's order), for the owner to remove off the
        event loop while holding ``meta_lock``, so that a sync's metadata is not written after them
        (nsqd/file_remover.py). Nothing is renamed or removed here, on the event loop: a call to
        the filesystem can wait, and every client with it."""
        self.generation += 1  # a sync job's metadata, checked under meta_lock, is no longer written
        read_done, self._read_files_done = self._read_files_done, []
        return [*read_done, *self._let_go_of_data_files(), self.meta_file_name()]

    def close(self) -> None:
        """Sync and release the files (graceful stop)."""
        self.closing_sync().run()

    def closing_sync(self) -> SyncJob:
        """Release the files (graceful stop); the sync that makes what was written durable, for
        the owner to run (nsqd runs every queue's in worker threads)."""
        job = self.prepare_sync()
        self._close_read_file()
        self._close_write_file()
        return job

    def _drop_unsynced(self) -> None:
        for fd in self._unsynced_fds:
            os.close(fd)
        self._unsynced_fds.clear()
