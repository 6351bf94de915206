"""The changes an operator makes through nsqadmin, for the JSON API and the pages alike.

Each one runs on the cluster (clusterinfo/cluster.py), answers with the partial failures met on
the way, and is announced to --notification-http-endpoint under NSQ's action names.
As in NSQ, pause/unpause/empty are announced even when they failed; create, delete and
tombstone only when at least part of them was done. Beyond NSQ, drain_node (of a node the
cluster lists) is announced as pause is, done or not.
"""

from starlette.requests import Request

from clusterinfo.cluster import TOPIC_ACTIONS, ClusterInfo

from .notify import Notifier


class Operator:
    def __init__(self, ci: ClusterInfo, notifier: Notifier):
        self.ci = ci
        self.notifier = notifier

    async def create(self, request: Request, topic: str, channel: str = "") -> list[str]:
        errors = await self.ci.create_topic_channel(topic, channel)
        self.notifier.notify("create_topic", request, topic)
        if channel:
            self.notifier.notify("create_channel", request, topic, channel)
        return errors

    async def act(self, request: Request, action: str, topic: str, channel: str = "") -> list[str]:
        """pause, unpause or empty a topic, or a channel of it."""
        if action not in TOPIC_ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        try:
            return await self.ci.act(action, topic, channel)
        finally:
            self.notifier.notify(f"{action}_{'channel' if channel else 'topic'}", request, topic, channel)

    async def pace(self, request: Request, topic: str, channel: str, rate: int) -> list[str]:
        """Beyond NSQ: the channel's pace (messages a second, 0: none), announced as ``pace_channel``."""
        try:
            return await self.ci.pace_channel(topic, channel, rate)
        finally:
            self.notifier.notify("pace_channel", request, topic, channel)

    async def delete(self, request: Request, topic: str, channel: str = "") -> list[str]:
        if channel:
            errors = await self.ci.delete_channel(topic, channel)
            self.notifier.notify("delete_channel", request, topic, channel)
        else:
            errors = await self.ci.delete_topic(topic)
            self.notifier.notify("delete_topic", request, topic)
        return errors

    async def drain(self, request: Request, node: str) -> list[str]:
        """Beyond NSQ: start draining the nsqd ``node`` (nsqd/drain.py); announced as drain_node."""
        try:
            return await self.ci.drain_node(node)
        finally:
            self.notifier.notify("drain_node", request, "", node=node)

    async def tombstone(self, request: Request, topic: str, node: str) -> list[str]:
        errors = await self.ci.tombstone_node_for_topic(topic, node)
        self.notifier.notify("tombstone_topic_producer", request, topic, node=node)
        return errors
