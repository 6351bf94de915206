"""A channel: one consumer group's copy of a topic's messages (nsqd/channel.go).

Theory of operation:

* Queued messages wait in a MessageQueue: in memory up to --mem-queue-size, the rest in
  the channel's disk queue. A message in memory is the object the topic made when it
  accepted the publish (nsqd/message.py), shared with every other channel of the topic.
* Delivery is pushed, not polled: ``_ready`` holds the subscribed clients that can take
  a message now (in_flight < RDY), ``_in_ready`` the same clients as a set. A message put
  into the channel goes straight to the next ready client, round-robin; it is queued only
  when nobody is ready.
  Invariant (while unpaused): a ready client exists only if the queue, memory and disk,
  is empty. A client that becomes ready again (RDY, FIN, REQ, timeout) drains it first.
* In-flight messages live on the client that holds them (``Client.in_flight``), which
  also owns their timeouts. Deferred messages (REQ with a delay, DPUB) wait in a heap
  ordered by deadline; nsqd's one deferred timer (nsqd/deferred_timer.py) calls
  ``release_due`` when the earliest one is due.
* Beyond NSQ, a paced channel (nsqd/pacing.py) keeps nobody in ``_ready``: every message
  queues, and ``client_ready`` hands the client to the pacer, which delivers from the queue
  as its tokens allow (``deliver_queued``).
"""

import heapq
import itertools
import math
import time
from collections import deque

import trio

from common.names import is_ephemeral

from .chunked_queue import untracked
from .message_queue import MessageQueue, queue_name
from .processing_time import new_processing_time
from .quantile import Quantile


class Channel:
    def __init__(self, topic, name: str):
        self.topic = topic
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.paused = False
        self.exiting = False
        self.clients: dict[int, object] = {}
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        # only the channel's own name decides (nsqd/channel.go): a durable channel of an ephemeral
        # topic has a disk queue, which keeps its overflow and what it holds at a stop
        self.queue = MessageQueue(queue_name(topic.name, name), topic.nsqd, self.ephemeral)
        self._ready: deque = deque()
        self._in_ready: set = set()
        # (deadline, order, message), a heap; untracked: a full collection walked 1,000,000 deferred
        # messages one by one, 120-280 ms (the entries the young collections untrack themselves)
        self._deferred: list[tuple[float, int, bytes]] = untracked([])
        self._deferred_order = itertools.count()
        self.screen = None  # beyond NSQ: the checks before a delivery (nsqd/screen.py), set by nsqd
        self.journal = None  # beyond NSQ: --persist-deferred's write-through files (nsqd/deferred_store.py)
        self.pacer = None  # beyond NSQ: its token bucket while paced (nsqd/pacing.py); no client is then in _ready
        opts = topic.nsqd.opts
        percentiles = opts.e2e_processing_latency_percentile
        # FIN records into it (nsqd/client.py) only when percentiles are configured, as in NSQ
        self.e2e_latency = Quantile(round(opts.e2e_processing_latency_window_time * 1e9), percentiles,
                                    time.time_ns()) if percentiles else None
        self.processing_time = new_processing_time(opts)  # beyond NSQ: delivery to FIN (nsqd/processing_time.py)

    def __repr__(self) -> str:
        return f"<Channel {self.topic.name}:{self.name}>"

    def set_screen(self, screen) -> None:
        """The checks before each delivery (nsqd/screen.py), or None."""
        self.screen = screen

    def set_pacer(self, pacer) -> None:
        """Beyond NSQ: pace deliveries with ``pacer`` (nsqd/pacing.py), or None. Ready consumers
        are asked again, so they go to the pacer or back to the direct deliveries."""
        self.pacer = pacer
        self._forget_ready_clients()
        for client in list(self.clients.values()):
            self.client_ready(client)

    def set_journal(self, journal) -> None:
        """Beyond NSQ: record deferrals and deliveries in ``journal`` (nsqd/deferred_store.py)."""
        self.journal = journal

    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def backend_depth(self) -> int:
        return self.queue.backend_depth

    @property
    def deferred_count(self) -> int:
        return len(self._deferred)

    @property
    def in_flight_count(self) -> int:
        return sum(len(client.in_flight) for client in self.clients.values())

    def _delivering(self) -> bool:
        return not self.paused and not self.exiting

    def put_many(self, messages: list[bytes]) -> None:
        """New messages from the topic; OSError if some could not be written to disk."""
        if self.journal is not None and self.journal.handed_again:
            messages = self.journal.not_handed_before(messages)
        self.message_count += len(messages)
        if self._delivering() and self._ready:
            taken = self._deliver_many_to_ready(messages)
            if taken == len(messages):
                return
            messages = messages[taken:]
        self.queue.put(messages)
        if self.pacer is not None:
            self.pacer.queued()

    def _deliver_many_to_ready(self, messages) -> int:
        """Hand messages to ready clients; how many were taken. The ready clients take turns,
        round-robin, each a run of the messages at once (an even share of those left among the
        clients yet to have their turn in this round, as many as its RDY allows): one framing and
        one flush decision a client, not one a message."""
        ready, in_ready = self._ready, self._in_ready
        taken, total = 0, len(messages)
        turns = 0  # clients yet to have their turn in this round
        while ready and taken < total:
            if not turns:
                turns = len(ready)
            client = ready[0]
            share = -(-(total - taken) // turns)
            turns -= 1
            if client.can_take_message():
                taken = client.send_messages(messages, taken, taken + share)
                if client.can_take_message():
                    ready.rotate(-1)
                    continue
            in_ready.discard(ready.popleft())
        return taken

    def requeue_message(self, message: bytes, delay: float) -> None:
        """A client's REQ: the message back now, or after ``delay`` (nsqd's RequeueMessage)."""
        self.requeue_count += 1
        if self.processing_time is not None:
            self.processing_time.requeued()
        if delay > 0:
            self.defer(message, delay)
        else:
            self.requeue(message)

    def timed_out(self, message: bytes) -> None:
        """A message whose msg_timeout passed in flight comes back."""
        self.timeout_count += 1
        if self.processing_time is not None:
            self.processing_time.timed_out()
        self.requeue(message)

    def requeue(self, message: bytes) -> None:
        """A message back from a client (REQ 0, timeout, disconnect) or out of deferral."""
        if not self._delivering() or not self._deliver_many_to_ready((message,)):
            if self.queue.requeue(message) and self.journal is not None:
                self.journal.queued(message)
            if self.pacer is not None:
                self.pacer.queued()

    def client_ready(self, client) -> None:
        """The client can take more messages: drain the queue into it, then mark it ready."""
        if not self._delivering() or not client.can_take_message():
            return
        if self.pacer is not None:
            self.pacer.client_ready(client)  # it delivers as its tokens allow
            return
        queue = self.queue
        while queue.messages:
            client.send_messages(queue.take_from_memory(client.ready_count - len(client.in_flight)), 0)
            if not client.can_take_message():
                return
        while queue.has_backend_data():
            messages = queue.take_from_disk(client.ready_count - len(client.in_flight))
            client.send_messages(messages, 0)
            if not client.can_take_message():
                return
            if not messages:
                break
        if client not in self._in_ready:
            self._in_ready.add(client)
            self._ready.append(client)

    def deliver_queued(self, client, limit: int) -> int:
        """Up to ``limit`` queued messages to ``client``, memory first, as many as it can take;
        how many it got (a paced channel's deliveries, nsqd/pacing.py)."""
        in_flight, queue = client.in_flight, self.queue
        before = len(in_flight)
        while client.can_take_message():
            count = min(limit - (len(in_flight) - before), client.ready_count - len(in_flight))
            if count <= 0:
                break
            if queue.messages:
                client.send_messages(queue.take_from_memory(count), 0)
            elif queue.has_backend_data() and (messages := queue.take_from_disk(count)):
                client.send_messages(messages, 0)
            else:
                break
        return len(in_flight) - before

    def add_client(self, client) -> None:
        self.clients[client.id] = client

    def remove_client(self, client) -> None:
        """The client left: its in-flight messages go back to the channel at once."""
        if self.clients.pop(client.id, None) is None:
            return
        if client in self._in_ready:
            self._in_ready.remove(client)
            self._ready.remove(client)
        returned = client.take_in_flight()
        self.requeue_count += len(returned)
        for msg in returned:
            self.requeue(msg.requeued())
        if self.ephemeral and not self.clients and not self.exiting:
            self.topic.delete_channel(self.name)

    def defer_handed_on(self, message: bytes, delay: float) -> None:
        """A deferred message from the topic (DPUB, or one it held until it had channels)."""
        if self.journal is not None and self.journal.had_at_start(message):
            return  # handed on once already, before a crash
        self.message_count += 1
        self.defer(message, delay)

    def defer(self, message: bytes, delay: float) -> None:
        deadline = trio.current_time() + delay
        heapq.heappush(self._deferred, (deadline, next(self._deferred_order), message))
        if self._deferred[0][0] == deadline:
            self.topic.nsqd.deferred_timer.wake_at(self, deadline)
        if self.journal is not None:
            self.journal.deferred(message, delay)

    def deferred_items(self) -> list[tuple[float, bytes]]:
        """(deadline, message) of every deferred message, soonest first."""
        return [(deadline, message) for deadline, _, message in sorted(self._deferred)]

    def forget_deferred(self) -> None:
        """Forget the deferred messages (nsqd is stopping and wrote them elsewhere)."""
        self._deferred.clear()

    def release_due(self, now: float) -> float:
        """Move the deferred messages due by ``now`` into the channel; when the next one is due."""
        heap = self._deferred
        while heap and heap[0][0] <= now:
            message = heapq.heappop(heap)[2]
            self.requeue(message)
            if self.journal is not None:
                self.journal.released(message)
        return heap[0][0] if heap else math.inf

    def pause(self) -> None:
        self.paused = True
        self._forget_ready_clients()

    def _forget_ready_clients(self) -> None:
        self._ready.clear()
        self._in_ready.clear()

    def unpause(self) -> None:
        self.paused = False
        for client in list(self.clients.values()):
            self.client_ready(client)

    def empty(self) -> None:
        """Drop every queued, deferred and in-flight message (nsqd's Channel.Empty)."""
        self.queue.empty()
        self._deferred.clear()
        for client in list(self.clients.values()):
            client.take_in_flight()
            self.client_ready(client)

    def stop_delivering(self) -> None:
        """nsqd is stopping: messages coming back from clients stay in the channel."""
        self.exiting = True
        self._forget_ready_clients()

    def close(self) -> None:
        """Write what is still held to disk and sync (nsqd's exit), in NSQ's order (channel.go's
        flush): queued, in flight, deferred."""
        held = [msg.requeued() for client in self.clients.values() for msg in client.take_in_flight()]
        held += [message for _, _, message in sorted(self._deferred)]
        self._deferred.clear()
        self.queue.close(held)

    def delete(self) -> None:
        """Drop everything, in flight too: consumers still disconnecting must not requeue
        into (and so recreate) the deleted disk queue."""
        self.exiting = True
        self._deferred.clear()
        for client in self.clients.values():
            client.take_in_flight()
        self.queue.delete()
