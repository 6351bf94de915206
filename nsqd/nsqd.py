"""The daemon: its topics, listeners, data directory and the tasks they share (nsqd/nsqd.go).

Lifecycle: ``run`` locks --data-path, loads nsqd.dat (topics, channels, pause states; the
disk queues pick up their backlogs), writes it back, listens on TCP and HTTP, and serves
until ``stop()``. Stopping closes the listeners and every client (their in-flight
messages return to their channels), then writes everything still in memory, deferred
or in flight to the disk queues, syncs them, saves nsqd.dat and unlocks the directory.
"""

import gc
import itertools
import logging
import os
import socket
import time
from collections.abc import Coroutine

import trio

from common import VERSION
from common.message import MIN_MESSAGE_LENGTH
from common.protocol_v1 import Register, Unregister
from serving.http import HTTPServer
from serving.listeners import bound_port, format_address, open_listeners, tls_listeners

from . import metadata, slices, statsd
from .chunks import TOPICS_A_CHUNK
from .diskqueue import DiskQueue, SyncJob
from .dead_letter import DeadLetters
from .deferred_store import DeferredStore
from .deferred_timer import DeferredTimer
from .dirlock import DirLock
from .drain import Drain
from .file_remover import FileRemover
from .auth import AuthServers
from .group_commit import GroupCommit, PublishFailed, SyncRound
from .guid import GuidFactory
from .http_api import HTTPAPI, tls_required_handler
from .lookup import Lookup
from .message_queue import queue_name
from .message_ttl import MessageTTL
from .options import TLS_REQUIRED
from .heartbeats import Heartbeats
from .output_batch import OutputBatch
from .pacing import Pacing
from .queue_bound import QueueBounds
from .screen import screen_for
from .slices import Steps, at_once, in_slices
from .stats import GCPauses
from .tcp import TCPServer
from .tls import client_context, server_context
from .topic import Topic
from .turns import Turns
from .worker_shares import run_in_shares

log = logging.getLogger("nsqd")

SYNC_THREADS = 2
EXIT_SYNC_THREADS = 16
TLS_HANDSHAKES = 4
METADATA_REST = 3  # after a background rewrite of nsqd.dat, rest this many times as long as it took


class NSQD:
    def __init__(self, opts):
        self.opts = opts
        self.data_path = opts.data_path or os.getcwd()
        self.guid = GuidFactory(opts.node_id)
        self.topics: dict[str, Topic] = {}
        self.output_batch = OutputBatch()
        self.heartbeats = Heartbeats(self.output_batch)
        self.deferred_timer = DeferredTimer()
        self.tcp = TCPServer(self, opts.io_backend)
        self.start_time = int(time.time())
        self.hostname = socket.gethostname()
        self.tcp_port = 0
        self.http_port = 0
        self.https_port = 0
        self.tls_context = server_context(opts)
        # TLS handshakes at once: 200 clients connecting together put 200 handshake steps (a
        # signature each) in one round of the loop, and a PUB waited behind all of them
        self.tls_handshakes = trio.CapacityLimiter(TLS_HANDSHAKES)
        self.turns = Turns()  # new connections' work, a few tasks a round (nsqd/turns.py)
        self.auth_servers = AuthServers(
            opts.auth_http_address, opts.auth_http_request_method, opts.http_client_connect_timeout,
            opts.http_client_request_timeout, client_context(opts)) if opts.auth_http_address else None
        self.exiting = False
        self.draining = False  # beyond NSQ: refusing new messages, topics and channels (nsqd/drain.py)
        self.gc_pauses = GCPauses()
        self._health_error: str | None = None
        self._client_ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._tasks: dict[object, trio.CancelScope] = {}
        self._diskqueues: set[DiskQueue] = set()
        self._sync_due: set[DiskQueue] = set()
        self._used: set[DiskQueue] = set()  # read or written since the last timed sync round
        self._sync_wanted = trio.Event()
        self._used_again = trio.Event()  # set when a queue is used while none was since the last round
        self._queue_meta_due: dict[DiskQueue, SyncJob] = {}  # each queue's newest fsynced snapshot
        self._exit_syncs: list[SyncJob] = []  # the closed disk queues' syncs, run at the end of a graceful stop
        self._queue_meta_wanted = trio.Event()
        self.group_commit = GroupCommit(enabled=opts.sync_every == 1)
        self.sync_limiter = trio.CapacityLimiter(SYNC_THREADS)  # worker threads for a round's fsyncs
        self._metadata_dirty = trio.Event()
        self._metadata_writer = metadata.MetadataWriter(self.data_path)
        self._metadata_entries = metadata.EncodedEntries()
        self.file_remover = FileRemover(self.data_path)
        self._stopped = trio.Event()
        self._lock = DirLock(self.data_path)
        self.lookup = Lookup(self)
        self.message_ttl = MessageTTL(self)
        self.dead_letters = DeadLetters(self)
        self.deferred_store = DeferredStore(self)
        self.drain = Drain(self)
        self.pacing = Pacing(self)
        self.queue_bounds = QueueBounds(self)

    # -- lifecycle -------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()``; then shut down gracefully."""
        self._lock.acquire()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._load_metadata()
                self.save_metadata()
                gc.freeze()  # the topics and channels of nsqd.dat live as long as nsqd: out of every full collection
                await self._start_listeners(nursery)
                self.lookup.set_addresses(self.opts.lookupd_tcp_address)
                nursery.start_soon(self._sync_loop)
                nursery.start_soon(self._queue_meta_loop)
                nursery.start_soon(self._metadata_loop)
                nursery.start_soon(self.file_remover.run)
                nursery.start_soon(self.heartbeats.run)
                nursery.start_soon(self.turns.run)
                nursery.start_soon(self.deferred_timer.run)
                self.tcp.start(nursery)
                nursery.start_soon(self.message_ttl.run)
                if self.auth_servers is not None:
                    nursery.start_soon(self.auth_servers.run)
                if self.deferred_store.write_through:
                    nursery.start_soon(self.deferred_store.run)
                if self.opts.statsd_address:
                    nursery.start_soon(statsd.run, self)
                task_status.started(self)
                await self._stopped.wait()
                self._begin_exit()
                nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):  # what was acknowledged is on disk before nsqd exits
                await self._close_queues()
            log.info("LOOKUP: closing")  # as nsqd's lookupLoop ends (the peers ended with the nursery)
        finally:
            self.tcp.close()
            self._lock.release()
        log.info("NSQ: bye")

    def stop(self) -> None:
        self._stopped.set()

    def refuse_new(self) -> None:
        """The drain began: refuse new messages, topics and channels from now on."""
        self.draining = True

    def signalled(self, name: str) -> bool:
        """SIGINT or SIGTERM arrived: whether nsqd stops now. With --sigterm=drain a SIGTERM
        starts a drain instead (nsqd/drain.py), which stops nsqd once everything is delivered."""
        if name == "SIGTERM" and self.opts.sigterm == "drain":
            self.drain.start("received SIGTERM")
            return False
        self.stop()
        return True

    async def _start_listeners(self, nursery: trio.Nursery) -> None:
        listeners = await open_listeners(self.opts.tcp_address, "--tcp-address")
        self.tcp_port = bound_port(listeners)
        log.info("TCP: listening on %s", format_address(listeners[0].socket.getsockname()))
        log.info("TCP: I/O backend %s", self.tcp.describe())
        await nursery.start(trio.serve_listeners, self.serve_connection, listeners)
        if self.opts.http_address:
            http_listeners = await open_listeners(self.opts.http_address, "--http-address")
            self.http_port = bound_port(http_listeners)
            log.info("HTTP: listening on %s", format_address(http_listeners[0].socket.getsockname()))
            api = HTTPAPI(self)
            handler = tls_required_handler(self) if self.opts.tls_required == TLS_REQUIRED else api
            server = HTTPServer(handler, max_body_size=max(self.opts.max_body_size, self.opts.max_msg_size),
                                body_limit=api.body_limit)
            await nursery.start(server.serve, http_listeners)
        self._fill_in_options()
        if self.tls_context is not None and self.opts.https_address:
            https_listeners = await open_listeners(self.opts.https_address, "--https-address")
            self.https_port = bound_port(https_listeners)
            log.info("HTTPS: listening on %s", format_address(https_listeners[0].socket.getsockname()))
            api = HTTPAPI(self)
            server = HTTPServer(api, max_body_size=max(self.opts.max_body_size, self.opts.max_msg_size),
                                name="HTTPS", body_limit=api.body_limit)
            await nursery.start(server.serve, tls_listeners(https_listeners, self.tls_context))

    def _fill_in_options(self) -> None:
        """What nsqd.New fills in once its listeners are bound, so /config shows it: the bound
        ports as the broadcast ports the flags left at 0, the statsd prefix with its host key."""
        opts = self.opts
        opts.broadcast_tcp_port = opts.broadcast_tcp_port or self.tcp_port
        opts.broadcast_http_port = opts.broadcast_http_port or self.http_port
        opts.statsd_prefix = statsd.host_prefix(opts.statsd_prefix, opts.broadcast_address, opts.broadcast_http_port)

    def _begin_exit(self) -> None:
        """Stop delivering, so what clients give back on disconnect stays in the channels."""
        self.exiting = True
        for topic in self.topics.values():
            for channel in topic.channels.values():
                channel.stop_delivering()

    async def _close_queues(self) -> None:
        self.save_metadata()
        log.info("NSQ: closing topics")
        await self.deferred_store.close_topics(list(self.topics.values()))
        for topic in self.topics.values():
            topic.close()
        await self._run_exit_syncs()
        await self.deferred_store.closed_topics(list(self.topics.values()))  # their messages are in the disk queues
        await self.file_remover.move_outstanding()  # a topic deleted just before the stop leaves no files

    def sync_at_exit(self, job: SyncJob) -> None:
        """A closed disk queue's sync, run with the others' by the graceful stop."""
        self._exit_syncs.append(job)

    async def _run_exit_syncs(self) -> None:
        """Every closed queue's fsyncs and metadata, shared among EXIT_SYNC_THREADS worker threads:
        30,000 queues' one after another held the stop for minutes (the filesystem's journal
        commits concurrent fsyncs together)."""
        jobs, self._exit_syncs = self._exit_syncs, []
        for job, exc in await run_in_shares(SyncJob.run, jobs, EXIT_SYNC_THREADS):
            self.disk_failed(job.queue.name, exc)

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """A TCP client's connection, from its accept (or a test's in-memory stream) to its end."""
        await self.tcp.serve(stream, next(self._client_ids))

    @property
    def connections(self):
        """The TCP clients connected now."""
        return self.tcp.connections

    # -- metadata ----------------------------------------------------------------------

    def _load_metadata(self) -> None:
        saved = metadata.load(self.data_path)
        for entry in saved:
            topic = self.get_topic(entry.name, from_metadata=True)
            if entry.paused:  # only ever pauses, as in NSQ: a topic listed twice stays paused
                topic.pause()
            self.message_ttl.load(topic, entry.extras)
            self.queue_bounds.load(topic, entry.extras)
            for channel_entry in entry.channels:
                channel = topic.get_channel(channel_entry.name)
                self.dead_letters.load(channel, channel_entry.extras)
                self.pacing.load(channel, channel_entry.extras)
                if channel_entry.paused:
                    channel.pause()
        log.info("NSQ: loaded metadata for %d topics from %s", len(saved), self.data_path)

    def _metadata_snapshot(self) -> list[metadata.TopicMeta]:
        return at_once(self._metadata_steps())

    def _metadata_steps(self) -> Steps[list[metadata.TopicMeta]]:
        """What nsqd.dat records, a topic at a time (nsqd/slices.py)."""
        topics = []
        for topic in list(self.topics.values()):
            if not topic.ephemeral:
                topics.append(metadata.TopicMeta(topic.name, topic.paused, tuple(
                    metadata.ChannelMeta(channel.name, channel.paused,
                                         {**self.dead_letters.metadata(channel), **self.pacing.metadata(channel)})
                    for channel in topic.channels.values() if not channel.ephemeral),
                    {**self.message_ttl.metadata(topic), **self.queue_bounds.metadata(topic)}))
            yield
        return topics

    def _encoded_metadata_steps(self) -> Steps[list[bytes]]:
        """One work in slices: the snapshot is never there while the collector runs (nsqd/slices.py)."""
        snapshot = yield from self._metadata_steps()
        encoded = yield from self._metadata_entries.steps(snapshot)
        yield from slices.released_steps(snapshot, TOPICS_A_CHUNK)  # at once, 10,000 topics' took 3 ms
        return encoded

    def save_metadata(self) -> None:
        """Write nsqd.dat now, holding the event loop (at start and at exit). At start this fills the
        encoded entries' cache before gc.freeze(), so the first rewrite after finds every entry there and
        the collector never walks them."""
        try:
            encoded = at_once(self._metadata_entries.steps(self._metadata_snapshot()))
            self._metadata_writer.write(self._metadata_writer.number(), encoded)
        except OSError as exc:
            log.error("failed to persist metadata - %s", exc)

    async def write_metadata(self) -> None:
        """Write nsqd.dat and return once it is written (a pause is saved before its answer, as in
        nsqd): the snapshot taken and encoded in slices, the file written by a worker thread."""
        number = self._metadata_writer.number()
        data = await in_slices(self._encoded_metadata_steps())
        try:
            await trio.to_thread.run_sync(self._metadata_writer.write, number, data)
        except OSError as exc:
            log.error("failed to persist metadata - %s", exc)

    def persist_metadata(self) -> None:
        """Ask for nsqd.dat to be rewritten soon (by a worker thread, off the event loop)."""
        self._metadata_dirty.set()

    async def _metadata_loop(self) -> None:
        while True:
            await self._metadata_dirty.wait()
            self._metadata_dirty = trio.Event()
            started = trio.current_time()
            await self.write_metadata()
            # A rewrite costs time in proportion to every topic and channel, so a burst of
            # creations shares rewrites: rewriting never takes more than a quarter of the time.
            await trio.sleep(METADATA_REST * (trio.current_time() - started))

    # -- topics and channels ---------------------------------------------------------

    def get_topic(self, name: str, from_metadata: bool = False) -> Topic:
        """The topic, created if new, at once: a new topic may not have started yet (see
        ``get_started_topic``); one loaded from nsqd.dat starts with its saved channels. Not
        for a name ``removing`` says is taken."""
        topic = self.topics.get(name)
        if topic is None:
            topic = self._create_topic(name, from_metadata)
        return topic

    async def get_started_topic(self, name: str) -> Topic:
        """The topic; when this call creates it, once it has started, as nsqd's GetTopic
        returns to the command that creates a topic only after asking the lookupds for its
        channels. A command for the topic meanwhile gets it at once, not started: its
        messages wait in the topic for the channels it starts with."""
        topic = self.topics.get(name)
        if topic is None:
            await self.removed(name)  # deleted a moment ago: a new one once the old files are out of the way
            topic = self.topics.get(name)
        if topic is None:
            if self.draining:
                raise PublishFailed("draining")
            topic = self._create_topic(name, from_metadata=False)
            await topic.wait_started()
        return topic

    def _create_topic(self, name: str, from_metadata: bool) -> Topic:
        """A new topic, registered with the lookupds. Unless it comes from nsqd.dat and a
        lookupd is connected, it starts (hands messages to its channels) only once it has
        the channels the lookupds know for it (nsqd/lookup.py)."""
        prepare = not from_metadata and self.lookup.connected()
        topic = Topic(name, self, started=not prepare)
        self.topics[name] = topic
        self.deferred_store.topic_created(topic)
        self.queue_bounds.apply(topic)
        log.info("TOPIC(%s): created", name)
        self.lookup.notify(Register(name))
        if prepare:
            self.spawn(self.lookup.prepare_topic, topic)
        elif not from_metadata and self.lookup.peers:
            log.error("no available nsqlookupd to query for channels to pre-create for topic %s", name)
        if not from_metadata and not topic.ephemeral:
            self.persist_metadata()
        return topic

    # -- publishing -------------------------------------------------------------------

    def publish(self, topic_name: str, bodies: list[bytes], delay: float = 0.0):
        """PUB, MPUB, DPUB (its one body deferred by ``delay``), POST /pub and /mpub: the
        messages go into the topic, created if new.

        Returns what the publisher waits for before it answers: None (nothing), the
        SyncRound whose fsync covers their disk writes (--sync-every=1, nsqd/group_commit.py),
        or, when this publish creates the topic, a coroutine that publishes once the topic has
        started (``get_started_topic``) and returns one of those. Raises PublishFailed when
        nsqd is stopping or draining, or a disk queue refused the messages."""
        if self.draining:
            raise PublishFailed("draining")
        topic = self.topics.get(topic_name)
        if topic is None:
            return self._publish_once_started(topic_name, bodies, delay)
        if self.exiting:
            raise PublishFailed("exiting")
        if topic.queue_bound:
            self.queue_bounds.admit(topic, bodies)  # beyond NSQ: room made, or QueueFull (nsqd/queue_bound.py)
        writes = self.group_commit.writes
        try:
            if delay > 0:
                topic.publish_deferred(bodies[0], time.time_ns(), delay)
            elif bodies:
                topic.publish(bodies, time.time_ns())
        except OSError as exc:
            raise PublishFailed(exc.strerror or str(exc)) from exc
        return self.group_commit.round_after(writes)

    async def _publish_once_started(self, topic_name: str, bodies: list[bytes], delay: float) -> SyncRound | None:
        await self.get_started_topic(topic_name)
        waiting = self.publish(topic_name, bodies, delay)  # the topic may have gone meanwhile: created again
        return await waiting if isinstance(waiting, Coroutine) else waiting

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        self._stop_task(topic)
        self.lookup.notify(Unregister(name))  # before its channels', as nsqd's Topic.exit
        topic.delete()
        self.message_ttl.forget_topic(topic)
        self.queue_bounds.forget_topic(topic)
        self.deferred_store.deleted(topic)
        log.info("TOPIC(%s): deleted", name)
        if not topic.ephemeral:
            self.persist_metadata()
        return True

    def removing(self, topic_name: str, channel_name: str | None = None) -> bool:
        """Whether the deleted topic's (or channel's) files are still being moved out of the way:
        until they are, a new one of that name cannot be made (nsqd/file_remover.py)."""
        return self.file_remover.busy(queue_name(topic_name, channel_name))

    async def removed(self, topic_name: str, channel_name: str | None = None) -> None:
        """Return once ``removing`` is false (at once if it is)."""
        await self.file_remover.settled(queue_name(topic_name, channel_name))

    def channel_created(self, channel) -> None:
        self.deferred_store.channel_created(channel)
        self.refresh_screen(channel)
        self.pacing.apply(channel)
        self.queue_bounds.channel_created(channel)
        self.lookup.notify(Register(channel.topic.name, channel.name))
        log.info("TOPIC(%s): new channel(%s)", channel.topic.name, channel.name)
        if not channel.ephemeral and not channel.topic.ephemeral:
            self.persist_metadata()

    def channel_deleted(self, channel) -> None:
        """Stop the channel's deferrals and disconnect its consumers."""
        self.deferred_timer.forget(channel)
        self.message_ttl.forget_channel(channel)
        self.dead_letters.forget_channel(channel)
        self.pacing.forget_channel(channel)
        self.queue_bounds.forget_channel(channel)
        self.deferred_store.deleted(channel)
        self.lookup.notify(Unregister(channel.topic.name, channel.name))
        for conn in list(self.connections):
            if conn.client.channel is channel:
                conn.close()
        log.info("CHANNEL(%s:%s): deleted", channel.topic.name, channel.name)
        if not channel.ephemeral:
            self.persist_metadata()

    def refresh_screen(self, channel) -> None:
        """Rebuild the checks the channel runs before each delivery (nsqd/screen.py)."""
        channel.set_screen(screen_for(self, channel))

    def release(self, steps: Steps[None]) -> None:
        """Free a large collection in slices on the loop, RELEASE_REST apart (a channel of 1,000,000
        messages emptied: nsqd/chunked_queue.py's released_steps)."""
        self.spawn(slices.paced, steps, slices.RELEASE_REST)

    def spawn(self, task, *args) -> None:
        """Run a task for as long as nsqd runs."""
        self._nursery.start_soon(task, *args)

    def start_task(self, owner, task) -> None:
        """Run ``owner``'s task until it returns or ``owner`` is deleted (its topic's pump)."""
        scope = trio.CancelScope()
        self._tasks[owner] = scope
        self._nursery.start_soon(self._run_task, owner, task, scope)

    async def _run_task(self, owner, task, scope: trio.CancelScope) -> None:
        try:
            with scope:
                await task()
        finally:
            if self._tasks.get(owner) is scope:
                del self._tasks[owner]

    def _stop_task(self, owner) -> None:
        scope = self._tasks.pop(owner, None)
        if scope is not None:
            scope.cancel()

    # -- lookupd registration ---------------------------------------------------------

    def lookup_identity(self) -> dict:
        """What this nsqd tells nsqlookupd in IDENTIFY (nsqd/lookup.go)."""
        opts = self.opts
        return {
            "version": VERSION,
            "tcp_port": opts.broadcast_tcp_port or self.tcp_port,
            "http_port": opts.broadcast_http_port or self.http_port,
            "hostname": self.hostname,
            "broadcast_address": opts.broadcast_address,
        }

    def registrations(self):
        """REGISTER commands for everything this nsqd has, as sent on every (re)connect, made as they
        are taken (nsqd/lookup_peer.py takes them in slices: a topic's channels as they are then); none
        while draining (nsqd/drain.py)."""
        if self.draining:
            return
        for topic in list(self.topics.values()):
            if topic.channels:
                yield from [Register(topic.name, name) for name in topic.channels]
            else:
                yield Register(topic.name)

    # -- disk queues and health ------------------------------------------------------

    def open_diskqueue(self, name: str) -> DiskQueue:
        queue = DiskQueue(name, self.data_path, self.opts.max_bytes_per_file, MIN_MESSAGE_LENGTH,
                          self.opts.max_msg_size + MIN_MESSAGE_LENGTH, self.deferred_store.write_through,
                          self.file_remover.remove)
        self._diskqueues.add(queue)  # not in _used: unwritten, the first round would walk 30,000 new queues
        return queue

    def delete_diskqueue(self, queue: DiskQueue) -> None:
        """Its topic or channel is deleted: a worker thread moves its files out of the way."""
        self.forget_diskqueue(queue)
        self.file_remover.move_away(queue.name, queue.delete(), queue.meta_lock)

    def forget_diskqueue(self, queue: DiskQueue) -> None:
        self._diskqueues.discard(queue)
        self._sync_due.discard(queue)
        self._used.discard(queue)

    def disk_written(self, queue: DiskQueue) -> None:
        """A disk queue took a write: health is good again. Only writes say so, as in nsqd:
        a disk that is full can still be read."""
        self._health_error = None
        self.group_commit.written()
        self.disk_used(queue)

    def disk_used(self, queue: DiskQueue) -> None:
        """A disk queue read or wrote: sync after --sync-every operations."""
        self._note_used(queue)
        if queue.writes_since_sync >= self.opts.sync_every:
            self._sync_due.add(queue)
            self._sync_wanted.set()

    def _note_used(self, queue: DiskQueue) -> None:
        if not self._used:
            self._used_again.set()
        self._used.add(queue)

    def disk_failed(self, name: str, exc: OSError) -> None:
        self._health_error = f"{name}: {exc.strerror or exc}"
        log.error("DISKQUEUE(%s): %s", name, exc)

    @property
    def health(self) -> str:
        return "OK" if self._health_error is None else f"NOK - {self._health_error}"

    def is_healthy(self) -> bool:
        return self._health_error is None

    async def _sync_loop(self) -> None:
        """fsync disk queues in worker threads, in rounds: after --sync-every operations, or
        every --sync-timeout for a queue with any unsynced operation. A round snapshots its
        queues at once, fsyncs them and ends the waits of the publishers it covers
        (nsqd/group_commit.py); their metadata is written meanwhile by ``_queue_meta_loop``,
        so publishers wait for the data's fsync only. While no queue has been used since the
        last round there is nothing to sync, and the loop sleeps until one is (Go's diskqueues
        each wake every 2 s to find they are not dirty): then its timed round comes at most
        --sync-timeout after that use, as it would at a fixed pace."""
        while True:
            if not self._used and not self._sync_due:
                self._used_again = trio.Event()
                await self._used_again.wait()
            with trio.move_on_after(self.opts.sync_timeout):
                await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            if self._sync_due:
                due, self._sync_due = self._sync_due, set()
            else:  # the queues used since the last such round, not all 30,000 of 10,000 topics (6 ms)
                due = {queue for queue in self._used if queue.writes_since_sync}
                self._used = set()
            sync_round = self.group_commit.begin_round()
            jobs = [queue.prepare_sync() for queue in due if queue in self._diskqueues]
            flushed, errors = await self._in_threads(SyncJob.flush, jobs, self.sync_limiter) if jobs else ([], [])
            self.group_commit.end_round(sync_round, errors[0] if errors else None)
            for job in flushed:
                self._queue_meta_due[job.queue] = job
            if flushed:
                self._queue_meta_wanted.set()

    async def _queue_meta_loop(self) -> None:
        """Write each disk queue's newest fsynced metadata snapshot, one write at a time."""
        limiter = trio.CapacityLimiter(1)
        while True:
            await self._queue_meta_wanted.wait()
            self._queue_meta_wanted = trio.Event()
            jobs, self._queue_meta_due = list(self._queue_meta_due.values()), {}
            await self._in_threads(SyncJob.write_metadata, jobs, limiter)

    async def _in_threads(self, step, jobs: list[SyncJob], limiter) -> tuple[list[SyncJob], list[OSError]]:
        """``step(job)`` for every job in worker threads; the jobs done and the others' errors."""
        done: list[SyncJob] = []
        errors: list[OSError] = []

        async def run(job: SyncJob) -> None:
            try:
                await trio.to_thread.run_sync(step, job, limiter=limiter)
            except OSError as exc:
                self.disk_failed(job.queue.name, exc)
                errors.append(exc)
            else:
                done.append(job)

        async with trio.open_nursery() as nursery:
            for job in jobs:
                nursery.start_soon(run, job)
        return done, errors
