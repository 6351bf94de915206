"""A topic: takes published messages and copies each one to every channel (nsqd/topic.go).

Fan-out is a direct call: the same message objects go to every channel. While a
topic has no channel, or is paused, it keeps its messages in its own MessageQueue
(memory, then the topic's disk queue) and deferred ones (DPUB) with their delay; its
pump task hands that backlog to the channels, in batches, once there are channels and
the topic is not paused. New messages queue behind an existing backlog. The pump runs
only while there is a backlog to hand on: an idle topic costs no task.

As in nsqd, a held deferred message counts in the topic's depth and its delay starts
only when it reaches the channels: nsqd keeps it in the topic's memory queue, and its
messagePump starts the deferral when it puts the message into a channel.
"""

import logging

import trio

from common.names import is_ephemeral

from .channel import Channel
from .message import new_messages
from .message_queue import MessageQueue

log = logging.getLogger("nsqd")

PUMP_BATCH = 1000


class Topic:
    def __init__(self, name: str, nsqd, started: bool = True):
        self.name = name
        self.nsqd = nsqd
        self.ephemeral = is_ephemeral(name)
        self.paused = False
        self.started = started  # False until nsqd has created the channels lookupds know of
        self._start = None if started else trio.Event()
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self.queue = MessageQueue(name, nsqd, self.ephemeral)
        self._held_deferred: list[tuple[float, bytes]] = []  # (delay s, message)
        self.held_log = None  # beyond NSQ: --persist-deferred's write-through file (nsqd/deferred_store.py)
        self.queue_bound = 0  # beyond NSQ: bytes its queue and each channel's may hold (nsqd/queue_bound.py); 0 = any
        self._pumping = False

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"

    @property
    def depth(self) -> int:
        return len(self.queue) + len(self._held_deferred)

    @property
    def backend_depth(self) -> int:
        return self.queue.backend_depth

    def _fans_out(self) -> bool:
        return self.started and bool(self.channels) and not self.paused

    def start(self) -> None:
        self.started = True
        if self._start is not None:
            self._start.set()
        self._pump_backlog()

    async def wait_started(self) -> None:
        if self._start is not None:
            await self._start.wait()

    def publish(self, bodies: list[bytes], timestamp_ns: int) -> None:
        """Accept new messages; OSError if they could not all be stored."""
        messages = new_messages(self.nsqd.guid, timestamp_ns, bodies)
        fans_out = self._fans_out()
        if fans_out and not self.queue.has_messages():
            self._count(bodies)
            errors = []
            for channel in list(self.channels.values()):
                try:
                    channel.put_many(messages)
                except OSError as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]
            return
        self.queue.put(messages)
        self._count(bodies)
        if fans_out:  # else the pump has nothing to do until start, a channel or unpause starts it
            self._pump_backlog()

    def _count(self, bodies: list[bytes]) -> None:
        self.message_count += len(bodies)
        self.message_bytes += sum(map(len, bodies))

    def publish_deferred(self, body: bytes, timestamp_ns: int, delay: float) -> None:
        if delay <= 0:  # nsqd's topic pump defers only a message whose deferral is not 0
            self.publish([body], timestamp_ns)
            return
        [message] = new_messages(self.nsqd.guid, timestamp_ns, [body])
        self._count([body])
        if not self._fans_out():
            self._held_deferred.append((delay, message))
            if self.held_log is not None:
                self.held_log.held(message, delay)
            return
        for channel in list(self.channels.values()):
            channel.defer_handed_on(message, delay)

    def _has_backlog_to_pump(self) -> bool:
        return self._fans_out() and (self.queue.has_messages() or bool(self._held_deferred))

    def _pump_backlog(self) -> None:
        """Start the pump if there is a backlog for the channels and it is not running."""
        if not self._pumping and self._has_backlog_to_pump():
            self._pumping = True
            self.nsqd.start_task(self, self._run_pump)

    async def _run_pump(self) -> None:
        """Hand the backlog to the channels, a batch at a time, until there is none to hand on."""
        try:
            while self._has_backlog_to_pump():
                self._pump_batch()
                await trio.sleep(0)
        finally:
            self._pumping = False

    def _pump_batch(self) -> None:
        deferred, self._held_deferred = self._held_deferred, []
        messages = self.queue.take(PUMP_BATCH)
        for channel in list(self.channels.values()):
            for delay, message in deferred:
                channel.defer_handed_on(message, delay)
            try:
                channel.put_many(messages)
            except OSError as exc:
                log.error("TOPIC(%s): channel %s kept messages in memory: %s", self.name, channel.name, exc)
        if self.held_log is not None:
            if deferred:
                self.held_log.passed_on([message for _, message in deferred])
            self.held_log.handed_on()

    def set_queue_bound(self, bound: int) -> None:
        """Beyond NSQ: nsqd checks publishes against ``bound`` (nsqd/queue_bound.py); 0 = none."""
        self.queue_bound = bound

    def set_held_log(self, held_log) -> None:
        """Beyond NSQ: record held deferred messages in ``held_log`` (nsqd/deferred_store.py)."""
        self.held_log = held_log

    def held_deferred_items(self) -> list[tuple[float, bytes]]:
        """(delay, message) of the deferred messages held for the first channel."""
        return list(self._held_deferred)

    def forget_held(self) -> None:
        """Forget the held deferred messages (nsqd is stopping and wrote them elsewhere)."""
        self._held_deferred.clear()

    def hold_deferred(self, items: list[tuple[float, bytes]]) -> None:
        """Hold deferred messages read back at the start (nsqd/deferred_store.py)."""
        self._held_deferred += items
        self._pump_backlog()

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self, name)
            self.channels[name] = channel
            self.nsqd.channel_created(channel)
            self._pump_backlog()
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self.nsqd.channel_deleted(channel)
        channel.delete()
        if self.ephemeral and not self.channels:
            self.nsqd.delete_topic(self.name)
        return True

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._pump_backlog()

    def empty(self) -> None:
        """Drop the topic's own backlog (its channels keep theirs), as nsqd's Topic.Empty."""
        self.queue.empty()
        self._held_deferred.clear()

    def close(self) -> None:
        """nsqd is stopping: every message this topic and its channels hold goes to disk."""
        for channel in self.channels.values():
            channel.close()
        held = [message for _, message in self._held_deferred]
        self._held_deferred.clear()
        self.queue.close(held)

    def delete(self) -> None:
        for name in list(self.channels):
            channel = self.channels.pop(name)
            self.nsqd.channel_deleted(channel)
            channel.delete()
        self.queue.delete()
