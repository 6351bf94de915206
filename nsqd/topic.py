"""A topic: takes published messages and copies each one to every channel (nsqd/topic.go).

Fan-out is a direct call: the same header and body objects go to every channel. While a
topic has no channel, or is paused, it holds its messages (deferred ones with their due
time) and hands them over when a channel appears or it is unpaused.
"""

import trio

from common.message import TIMESTAMP_ATTEMPTS
from common.names import is_ephemeral

from .channel import Channel


class Topic:
    def __init__(self, name: str, nsqd):
        self.name = name
        self.nsqd = nsqd
        self.ephemeral = is_ephemeral(name)
        self.paused = False
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self._held_headers: list[bytes] = []
        self._held_bodies: list[bytes] = []
        self._held_deferred: list[tuple[float, bytes, bytes]] = []

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"

    @property
    def depth(self) -> int:
        return len(self._held_headers)

    def _new_headers(self, count: int, timestamp_ns: int) -> list[bytes]:
        prefix = TIMESTAMP_ATTEMPTS.pack(timestamp_ns, 0)
        return [prefix + msg_id for msg_id in self.nsqd.guid.new_ids(count)]

    def publish(self, bodies: list[bytes], timestamp_ns: int) -> None:
        headers = self._new_headers(len(bodies), timestamp_ns)
        self.message_count += len(bodies)
        self.message_bytes += sum(map(len, bodies))
        if self.paused or not self.channels:
            self._held_headers += headers
            self._held_bodies += bodies
            return
        for channel in self.channels.values():
            channel.put_many(headers, bodies)

    def publish_deferred(self, body: bytes, timestamp_ns: int, delay: float) -> None:
        header = self._new_headers(1, timestamp_ns)[0]
        self.message_count += 1
        self.message_bytes += len(body)
        if self.paused or not self.channels:
            self._held_deferred.append((trio.current_time() + delay, header, body))
            return
        for channel in self.channels.values():
            channel.message_count += 1
            channel.defer(header, body, delay)

    def _release_held(self) -> None:
        if self.paused or not self.channels:
            return
        headers, bodies, deferred = self._held_headers, self._held_bodies, self._held_deferred
        self._held_headers, self._held_bodies, self._held_deferred = [], [], []
        now = trio.current_time()
        for channel in self.channels.values():
            channel.put_many(headers, bodies)
            for due, header, body in deferred:
                channel.message_count += 1
                channel.defer(header, body, max(0.0, due - now))

    def get_channel(self, name: str) -> Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self, name)
            self.channels[name] = channel
            self.nsqd.start_channel(channel)
            self._release_held()
        return channel

    def delete_channel(self, name: str) -> bool:
        channel = self.channels.pop(name, None)
        if channel is None:
            return False
        self.nsqd.stop_channel(channel)
        if self.ephemeral and not self.channels:
            self.nsqd.delete_topic(self.name)
        return True

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._release_held()
