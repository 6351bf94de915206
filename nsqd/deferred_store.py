"""Deferred messages that keep their delay across restarts (beyond NSQ: --persist-deferred).

NSQ keeps deferred messages (DPUB, REQ with a delay) in memory; a graceful stop writes them
into the disk queue, which has no room for a due time, so after a restart they are delivered
at once (nsqio/nsq#1107, #674, #1432), and with --mem-queue-size=0 a deferral that reaches
the disk loses its delay even without a restart (#1375). NSQ's maintainers would fix it only
with a new disk format. Here go-diskqueue's files stay as they are: each queue's deferred
messages go in a file of their own beside them (nsqd/held_file.py), which NSQ ignores.

* With the flag, a graceful stop writes every channel's deferred messages with their due
  time to ``<topic>:<channel>.deferred.dat`` (and what a topic without channels holds, with
  its delay, to ``<topic>.deferred.dat``) instead of into the disk queue; a start reads them
  back and delivers each when due (at once if its time has passed). The file stays until the
  next stop rewrites it, so a crash after a restart loses none of them (some may come twice).
* With the flag and --mem-queue-size=0 ("write-through"), those files are kept current while
  nsqd runs, and ``<topic>:<channel>.inflight.dat`` too: a deferral is written (write(2))
  before it is acknowledged (DPUB's OK; REQ has no answer), a delivery's record in the same
  batch of deliveries, before the delivery's PUB is answered or the disk queue drops the
  file it was read from (finished read files are removed at the next read, not at once);
  a deferral's end and the in-flight file's garbage are tidied every --sync-timeout. So a
  kill -9 loses no acknowledged message: at the start, deferred messages come back with
  their due time and messages that were in flight are queued again, with their attempts.
  Messages finished since the last tidying may come back too, as messages read from a disk
  queue since its last sync do. A message written into a disk queue (REQ, a timeout, a
  deferral coming due, its topic's hand-on) just before the kill, whose note saying so was
  not written yet, is in the records the queue holds beyond its metadata (its syncs are
  snapshots taken on the event loop, after such a pair of writes): a start makes no other
  copy of those, from a deferred or in-flight record or from the topic's first batch.
* Without the flag, files left by an earlier run are still read at the start (nothing is
  ever lost by turning it off) and removed once the graceful stop has written their messages
  into the disk queues, NSQ's way: to hand a data directory back to NSQ v1.3, stop once
  without the flag.

Ephemeral topics and channels keep nothing on disk, with or without the flag.
"""

import logging
import os
import time
from collections.abc import Callable

import trio

from common.message import header_attempts, header_id, with_attempts

from .held_file import DEFERRED, HELD, IN_FLIGHT, RECORD, HeldFile, gone, position, record
from .screen import Part
from .worker_shares import run_in_shares

log = logging.getLogger("nsqd")

DEFERRED_SUFFIX = ".deferred.dat"
IN_FLIGHT_SUFFIX = ".inflight.dat"
STOP_FILE_THREADS = 4  # worker threads writing and removing the files at a graceful stop
TIDY_SLACK = 10_000  # records of a deferred file beyond twice the live ones before it is rewritten


class ChannelLog:
    """A write-through channel's files: its deferred messages, its messages in flight and how
    far its disk queue was read."""

    def __init__(self, nsqd, channel, deferred: HeldFile, in_flight: HeldFile, floors: dict[bytes, int],
                 handed_again: set[bytes]):
        self.nsqd = nsqd
        self.channel = channel
        self.deferred_file = deferred
        self.in_flight_file = in_flight
        self.deferred_records = 0  # written since the deferred file was last rewritten
        self.in_flight_dirty = False  # deliveries since the in-flight file was last rewritten
        self.in_flight_kept = 0  # messages in flight when it was
        self.position = channel.queue.backend.read_position()  # the disk queue's, as last recorded
        # ID -> attempts of the messages deferred or in flight at the start: a copy with fewer
        # attempts is an older one (the topic handed it on again after the crash), not delivered,
        # until the topic's disk queue is read past where it ended then, and the channel's past
        # where it ended at that moment
        self.floors = floors
        self.topic_end: tuple[int, int] | None = _topic_backend(channel).end_position()
        self.channel_end = channel.queue.backend.end_position()
        # IDs of the messages written to the disk queue after its last sync, while the topic has
        # a backlog: the crash may have come after a batch from the topic was written here and
        # before the topic recorded handing it on, so its first batch brings them again
        self.handed_again = handed_again

    def deferred(self, message: bytes, delay: float) -> None:
        """Channel.defer: the deferral is written before it is acknowledged."""
        self.deferred_file.add(record(DEFERRED, time.time_ns() + round(delay * 1e9), message))
        self.deferred_records += 1
        flush(self.nsqd, self.deferred_file)

    def released(self, message: bytes) -> None:
        """A deferred message came due and went back to the channel (into its disk queue, or
        to a consumer: then its delivery is recorded too): written at once, so a restart does
        not defer it a second time."""
        self.deferred_file.add(gone(header_id(message)))
        self.deferred_records += 1
        flush(self.nsqd, self.deferred_file)

    def had_at_start(self, message: bytes) -> bool:
        """Whether the message was deferred or in flight here at the start (so the topic, which
        had not recorded handing it on when the crash came, hands it on again)."""
        return header_id(message) in self.floors

    def not_handed_before(self, messages: list[bytes]) -> list[bytes]:
        """Channel.put_many, the topic's first batch since the start (the batch a crash cut
        short is the first one the topic hands on again: it reads from the same place, at
        least as many): those of its messages not written here already."""
        handed, self.handed_again = self.handed_again, set()
        new = [message for message in messages if header_id(message) not in handed]
        if len(new) < len(messages):
            log.info("CHANNEL(%s): %d messages of the topic's first batch held already (handed on before an "
                     "unclean stop)", self.channel.queue.name, len(messages) - len(new))
        return new

    def queued(self, message: bytes) -> None:
        """A message went back into the disk queue (after its write): a record of its last
        delivery must not queue it a second time at the start."""
        self.in_flight_file.add(gone(header_id(message)))
        flush(self.nsqd, self.in_flight_file)

    def emptied(self) -> None:
        """The channel was emptied: both files go, and the next tidy has nothing to write back
        (it would otherwise rewrite the in-flight file of the messages that were in flight)."""
        self.deferred_file.replace([])
        self.in_flight_file.replace([])
        self.deferred_records, self.in_flight_dirty, self.in_flight_kept = 0, False, 0

    def screen_part(self) -> Part:
        """Each delivery is noted in the in-flight file, and after the batch how far the disk
        queue was read: the batch's records go in one write, before the messages go out."""
        held, floors = self.in_flight_file, self.floors
        extend, pack = held.pending.extend, RECORD.pack

        def note(message: bytes) -> bool:
            attempts = (message[8] << 8) | message[9]
            if floors and attempts < floors.get(message[10:26], 0):
                return True  # an older copy of a message queued again or deferred at the start
            extend(pack(IN_FLIGHT, attempts + 1, len(message)))  # held_file's record, in place
            extend(message)
            return False

        def end() -> None:
            self.in_flight_dirty = True
            read_position = self.channel.queue.backend.read_position()
            if read_position != self.position:
                self.position = read_position
                held.add(position(read_position))
            flush(self.nsqd, held)

        return Part(lambda: note, end)

    def tidy(self) -> None:
        """Rewrite the in-flight file from the messages in flight now (after deliveries, or
        once some were finished), and the deferred file once most of its records are dead;
        otherwise write what is pending. A file that cannot be rewritten is left as it was."""
        if self.floors and self._older_copies_passed():
            self.floors.clear()
        in_flight = [msg for client in self.channel.clients.values() for msg in client.in_flight.values()]
        try:
            if self.in_flight_dirty or len(in_flight) != self.in_flight_kept:
                self.position = self.channel.queue.backend.read_position()
                self.in_flight_file.replace([position(self.position), *(
                    record(IN_FLIGHT, msg.attempts, msg.message) for msg in in_flight)])
                self.in_flight_dirty, self.in_flight_kept = False, len(in_flight)
            if self.deferred_records > 2 * self.channel.deferred_count + TIDY_SLACK:
                self.deferred_file.replace(deferred_records(self.channel.deferred_items()))
                self.deferred_records = 0
            else:
                self.deferred_file.flush()
        except OSError as exc:
            self.nsqd.disk_failed(self.channel.queue.name, exc)

    def _older_copies_passed(self) -> bool:
        if self.topic_end is not None:
            if _topic_backend(self.channel).read_position() < self.topic_end:
                return False
            self.topic_end, self.channel_end = None, self.channel.queue.backend.end_position()
        return self.channel.queue.backend.read_position() >= self.channel_end


class TopicLog:
    """A write-through topic's files: the deferred messages it holds until it has channels,
    and how far its disk queue was handed to its channels."""

    def __init__(self, nsqd, topic, held: HeldFile, handed: HeldFile):
        self.nsqd = nsqd
        self.topic = topic
        self.file = held
        self.handed_file = handed
        self.position = topic.queue.backend.read_position()  # as last recorded
        self.positions_written = 0  # since the handed file was last rewritten

    def held(self, message: bytes, delay: float) -> None:
        self.file.add(record(HELD, round(delay * 1e9), message))
        flush(self.nsqd, self.file)

    def passed_on(self, messages: list[bytes]) -> None:
        """The topic's held messages went to its channels (which wrote them first): written
        now, so a restart does not hand them on again."""
        for message in messages:
            self.file.add(gone(header_id(message)))
        flush(self.nsqd, self.file)

    def handed_on(self) -> None:
        """Messages read from the topic's disk queue went to its channels (which wrote them
        first): record how far it was read, so a restart does not hand them on again."""
        read_position = self.topic.queue.backend.read_position()
        if read_position != self.position:
            self.position = read_position
            self.handed_file.add(position(read_position))
            self.positions_written += 1
            flush(self.nsqd, self.handed_file)

    def tidy(self) -> None:
        flush(self.nsqd, self.file)
        if self.positions_written > TIDY_SLACK:
            try:
                self.handed_file.replace([position(self.position)])
                self.positions_written = 0
            except OSError as exc:
                self.nsqd.disk_failed(self.handed_file.path, exc)


def _topic_backend(channel):
    return channel.topic.queue.backend


def flush(nsqd, held: HeldFile) -> None:
    """Write the file's pending records; a refusal marks nsqd unhealthy (they stay pending)."""
    try:
        held.flush()
    except OSError as exc:
        nsqd.disk_failed(held.path, exc)


def skip_handed_on(queue, read_position: tuple[int, int] | None) -> None:
    """At the start: a disk queue recorded as read further than its metadata says (a crash
    came before its next sync) skips what was read and handed on then."""
    if read_position is not None and queue.backend is not None:
        skipped = queue.backend.skip_to(read_position)
        if skipped:
            queue.nsqd.disk_used(queue.backend)
            log.info("%s: %d messages handed on before an unclean stop skipped", queue.name, skipped)


def queued_since_sync(queue) -> set[bytes]:
    """At the start: the IDs of the messages still to be read from the disk queue that were
    written after its last sync (an unclean stop), so that no file's record of one of them
    makes a second copy (nsqd/diskqueue.py: the tail beyond the metadata)."""
    return {header_id(record) for record in queue.backend.unread_unclean_records()}


def held_records(items: list[tuple[float, bytes]]) -> list[bytes]:
    """H records for a topic's (delay in s, message) items."""
    return [record(HELD, round(delay * 1e9), message) for delay, message in items]


def deferred_records(items: list[tuple[float, bytes]]) -> list[bytes]:
    """D records for (trio deadline, message) items."""
    now, unix_now = trio.current_time(), time.time_ns()
    return [record(DEFERRED, unix_now + round((deadline - now) * 1e9), message) for deadline, message in items]


class DeferredStore:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.enabled = nsqd.opts.persist_deferred
        self.write_through = self.enabled and nsqd.opts.mem_queue_size == 0
        self.channel_logs: dict[object, ChannelLog] = {}
        self.topic_logs: dict[object, TopicLog] = {}

    def _file(self, queue_name: str, suffix: str) -> HeldFile:
        return HeldFile(os.path.join(self.nsqd.data_path, queue_name + suffix))

    # -- start: what earlier runs left -----------------------------------------------------

    def topic_created(self, topic) -> None:
        if topic.ephemeral:
            return
        held, handed = self._file(topic.name, DEFERRED_SUFFIX), self._file(topic.name, IN_FLIGHT_SUFFIX)
        entries, handed_position = held.read().messages, handed.read().position
        if entries:
            topic.hold_deferred([(value / 1e9, payload) for kind, value, payload in entries.values() if kind == HELD])
            log.info("TOPIC(%s): %d deferred messages read from %s", topic.name, len(entries), held.path)
        skip_handed_on(topic.queue, handed_position)
        if self.write_through:
            self.topic_logs[topic] = TopicLog(self.nsqd, topic, held, handed)
            topic.set_held_log(self.topic_logs[topic])
            self._rewrite(held, held_records(topic.held_deferred_items()))
            if handed_position is not None:
                self._rewrite(handed, [position(topic.queue.backend.read_position())])

    def channel_created(self, channel) -> None:
        """Read the channel's files back; with write-through, keep them current from now on."""
        if channel.ephemeral or channel.topic.ephemeral:
            return
        queue = channel.queue
        deferred, in_flight = self._file(queue.name, DEFERRED_SUFFIX), self._file(queue.name, IN_FLIGHT_SUFFIX)
        deferred_entries, in_flight_contents = deferred.read().messages, in_flight.read()
        skip_handed_on(queue, in_flight_contents.position)
        topic_backlog = self.write_through and channel.topic.queue.has_backend_data()
        queued = queued_since_sync(queue) if deferred_entries or in_flight_contents.messages or topic_backlog else set()
        unix_now = time.time_ns()
        floors = {}
        for msg_id, (kind, value, payload) in deferred_entries.items():
            # a deferral's last trace in the in-flight file is its going back into the disk queue
            # (as it came due): the crash came before its end was written here, or before even
            # that trace was, after the disk queue's write
            if kind == DEFERRED and msg_id not in in_flight_contents.gone and msg_id not in queued:
                channel.defer(payload, max(0, value - unix_now) / 1e9)
                floors[msg_id] = header_attempts(payload)
        # a delivery followed by a write into the disk queue (REQ, timeout) whose trace in the
        # in-flight file the crash came before: the message is in the disk queue already
        returned = [(msg_id, value, payload) for msg_id, (kind, value, payload) in in_flight_contents.messages.items()
                    if msg_id not in deferred_entries and msg_id not in queued]
        for msg_id, attempts, payload in returned:
            channel.requeue(with_attempts(payload, attempts))
            floors[msg_id] = attempts
        if deferred_entries or returned:
            log.info("CHANNEL(%s): %d deferred and %d in-flight messages read from %s", queue.name,
                     len(deferred_entries), len(returned), os.path.dirname(deferred.path) or ".")
        if self.write_through:
            handed_again = queued if topic_backlog else set()
            channel_log = ChannelLog(self.nsqd, channel, deferred, in_flight, floors, handed_again)
            self.channel_logs[channel] = channel_log
            channel.set_journal(channel_log)
            self._rewrite(deferred, deferred_records(channel.deferred_items()))
            # the messages that were in flight are in the disk queue now
            self._rewrite(in_flight, [position(queue.backend.read_position())])

    def screen_part(self, channel) -> Part | None:
        channel_log = self.channel_logs.get(channel)
        return channel_log.screen_part() if channel_log is not None else None

    # -- while running ------------------------------------------------------------------------

    async def run(self) -> None:
        """With write-through: tidy every --sync-timeout."""
        while True:
            await trio.sleep(self.nsqd.opts.sync_timeout)
            for channel_log in list(self.channel_logs.values()):
                channel_log.tidy()
            for topic_log in list(self.topic_logs.values()):
                topic_log.tidy()

    def emptied(self, owner) -> None:
        """A channel or topic was emptied: its deferred (and in-flight) messages went with it."""
        channel_log = self.channel_logs.get(owner)
        if channel_log is not None:
            channel_log.emptied()
        topic_log = self.topic_logs.get(owner)
        if topic_log is not None:
            topic_log.file.replace([])
            topic_log.handed_file.replace([])
        for suffix in (DEFERRED_SUFFIX, IN_FLIGHT_SUFFIX):
            self._file(owner.queue.name, suffix).remove()

    def deleted(self, owner) -> None:
        """A channel or topic was deleted: so are its files, moved out of the way by a worker thread
        with its disk queue's (nsqd/file_remover.py). One with no disk queue has none."""
        channel_log, topic_log = self.channel_logs.pop(owner, None), self.topic_logs.pop(owner, None)
        held = [channel_log.deferred_file, channel_log.in_flight_file] if channel_log is not None else []
        held += [topic_log.file, topic_log.handed_file] if topic_log is not None else []
        for held_file in held:
            held_file.close()
        if owner.queue.backend is not None:
            name = owner.queue.name
            self.nsqd.file_remover.move_away(name, [self._file(name, suffix).path
                                                    for suffix in (DEFERRED_SUFFIX, IN_FLIGHT_SUFFIX)])

    # -- graceful stop --------------------------------------------------------------------------

    async def close_topics(self, topics: list) -> None:
        """Before the topics' ``close()``: with the flag, deferred messages go to their files, not
        into the disk queues (where they stay if their file cannot be written). The records are
        made here, the files written by worker threads: 20,000 channels' files held the loop."""
        if not self.enabled:
            return
        writes: list[tuple[HeldFile, list[bytes], Callable[[], None]]] = []
        for topic in topics:
            if topic.ephemeral:
                continue
            writes += [(self._file(channel.queue.name, DEFERRED_SUFFIX), deferred_records(channel.deferred_items()),
                        channel.forget_deferred) for channel in topic.channels.values() if not channel.ephemeral]
            writes.append((self._file(topic.name, DEFERRED_SUFFIX), held_records(topic.held_deferred_items()),
                           topic.forget_held))
        failed = await run_in_shares(lambda write: write[0].replace(write[1]), writes, STOP_FILE_THREADS)
        for (held, records, _), exc in failed:
            log.error("failed to write %d deferred messages to %s, writing them to the disk queue: %s",
                      len(records), held.path, exc)
        unwritten = {id(write) for write, _ in failed}
        for write in writes:
            if id(write) not in unwritten:
                write[2]()  # forget what its file now holds

    async def closed_topics(self, topics: list) -> None:
        """After the topics' ``close()`` wrote what was queued and in flight into the disk queues:
        the in-flight files are done with; without the flag, so are the deferred files (read at
        the start, their messages now in the disk queues). Removed by worker threads."""
        suffixes = (IN_FLIGHT_SUFFIX,) if self.enabled else (IN_FLIGHT_SUFFIX, DEFERRED_SUFFIX)
        files = [self._file(name, suffix) for topic in topics
                 for name in (topic.name, *(channel.queue.name for channel in topic.channels.values()))
                 for suffix in suffixes]
        for held, exc in await run_in_shares(HeldFile.remove, files, STOP_FILE_THREADS):
            log.error("failed to remove %s - %s", held.path, exc)

    def _rewrite(self, held: HeldFile, records: list[bytes]) -> None:
        """At the start: the file as nsqd holds its messages now (left as it was if it cannot be)."""
        try:
            held.replace(records)
        except OSError as exc:
            self.nsqd.disk_failed(held.path, exc)
