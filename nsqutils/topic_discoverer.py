"""Which topics nsq_to_file archives (apps/nsq_to_file/topic_discoverer.go): those given with
``--topic``, or else every topic the nsqlookupds know, asked at start and every
``--topic-refresh``; either way only names in which ``--topic-pattern`` (a regular
expression) is found. A lookup that fails, even in part, is logged and the next one tried;
a topic whose logger cannot start is logged and tried again at the next refresh."""

import logging
import re
from typing import Awaitable, Callable

import anyio

from clusterinfo.cluster import ClusterInfo, UpstreamFailure


class TopicDiscoverer:
    def __init__(self, topics: list[str], pattern: re.Pattern | None, refresh: float, cluster: ClusterInfo | None,
                 add_topic: Callable[[str], Awaitable[bool]], log: logging.Logger):
        self.topics = topics
        self.pattern = pattern
        self.refresh = refresh
        self.cluster = cluster
        self.add_topic = add_topic
        self.log = log
        self.known: set[str] = set()

    def allowed(self, topic: str) -> bool:
        return self.pattern is None or self.pattern.search(topic) is not None

    async def update(self, topics: list[str]) -> None:
        for topic in topics:
            if topic in self.known:
                continue
            if not self.allowed(topic):
                self.log.warning("skipping topic %s (doesn't match pattern %s)", topic, self.pattern.pattern)
                continue
            if await self.add_topic(topic):
                self.known.add(topic)

    async def run(self) -> None:
        """The given topics; or the lookupds' topics now and every refresh; until cancelled (as NSQ's,
        even when no topic could be archived)."""
        if self.topics:
            await self.update(self.topics)
            await anyio.sleep_forever()
        while True:
            try:
                answer = await self.cluster.lookupd_topics()
                if answer.errors:
                    raise UpstreamFailure("\n".join(answer.errors))
            except UpstreamFailure as exc:
                self.log.error("could not retrieve topic list: %s", exc)
            else:
                await self.update(answer.value)
            await anyio.sleep(self.refresh)
