"""What nsqadmin and the utilities ask the cluster, and the actions nsqadmin takes on it
(internal/clusterinfo/data.go).

Every question goes to all lookupds (``--lookupd-http-address``) or all nsqd
(``--nsqd-http-address``) at once. NSQ's error rules are kept, because its API reports
them: when some daemons answer, the answers are used and the failures come back as
``errors`` (the API's ``"WARNING: ..."``); when none answers, :class:`UpstreamFailure`
(the API's 502 ``UPSTREAM_ERROR``). Actions (create, delete, pause, empty, tombstone) only
ever collect errors: a partial action is reported, not refused.

Where NSQ asks more than it needs, this asks less, with the same result: nsqd's
``/stats`` without clients when clients are not shown, and the topics without producers
from one ``/nodes`` per lookupd instead of one ``/lookup`` per topic.

``sources`` is any object with the program's ``lookupd_http_address``, ``nsqd_http_address``
(lists, read at each question, so nsqadmin's ``PUT /config/nsqlookupd_http_addresses`` takes
effect at once) and ``nsqd_auth_secret``; the queries are logged at debug level to the
program's logger, as NSQ's clusterinfo.New takes the program's log function.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable
from urllib.parse import quote

from . import producers as nodes
from .stats import node_topics
from .upstream import ACCEPT_V1, Upstream, UpstreamError, nsqd_headers

TOPIC_ACTIONS = ("pause", "unpause", "empty")


class UpstreamFailure(Exception):
    """No daemon answered: ``failed to query any nsqlookupd: <errors>``; ``codes`` are the
    V1 error codes of those that answered with one."""

    def __init__(self, text: str, codes: frozenset[str] = frozenset()):
        super().__init__(text)
        self.codes = codes


@dataclass
class Answer:
    """What the cluster answered, and what failed on the way (NSQ's PartialErr)."""
    value: Any
    errors: list[str] = field(default_factory=list)


def escape(value: str) -> str:
    """Go's url.QueryEscape."""
    return quote(value, safe="").replace("%20", "+")


def topic_query(topic: str, channel: str = "") -> str:
    return f"topic={escape(topic)}&channel={escape(channel)}" if channel else f"topic={escape(topic)}"


def _all_failed(kind: str, errors: list[Exception]) -> UpstreamFailure:
    return UpstreamFailure(f"failed to query any {kind}: " + "\n".join(map(str, errors)),
                           frozenset(getattr(error, "code", "") for error in errors))


class ClusterInfo:
    def __init__(self, upstream: Upstream, sources, log: logging.Logger):
        self.upstream = upstream
        self.sources = sources
        self.log = log
        self._nsqd_headers = nsqd_headers(sources.nsqd_auth_secret)

    @property
    def lookupds(self) -> list[str]:
        return self.sources.lookupd_http_address

    @property
    def nsqds(self) -> list[str]:
        return self.sources.nsqd_http_address

    async def _gather(self, calls: list[Awaitable]) -> tuple[list, list[Exception]]:
        """Run every call at once: (answers of those that worked, errors of those that failed)."""
        results = await asyncio.gather(*calls, return_exceptions=True)
        answers, errors = [], []
        for result in results:
            if isinstance(result, (UpstreamError, ValueError)):
                errors.append(result)
            elif isinstance(result, BaseException):
                raise result
            else:
                answers.append(result)
        return answers, errors

    async def _ask_all(self, kind: str, addresses: list[str], ask) -> Answer:
        """``ask(address)`` of every daemon; UpstreamFailure when none answers."""
        answers, errors = await self._gather([ask(address) for address in addresses])
        if len(errors) == len(addresses):
            raise _all_failed(kind, errors)
        return Answer(answers, [str(error) for error in errors])

    async def _get(self, url: str):
        self.log.debug("CI: querying %s", url)
        return await self.upstream.get_v1(url)

    async def _get_nsqd(self, url: str):
        self.log.debug("CI: querying %s", url)
        return await self.upstream.get_v1(url, self._nsqd_headers)

    # -- lookupd questions --------------------------------------------------------------

    async def lookupd_topics(self) -> Answer:
        async def ask(address):
            return (await self._get(f"http://{address}/topics")).get("topics") or []
        answer = await self._ask_all("nsqlookupd", self.lookupds, ask)
        return Answer(sorted({t for topics in answer.value for t in topics}), answer.errors)

    async def lookupd_topic_channels(self, topic: str) -> Answer:
        async def ask(address):
            return (await self._get(f"http://{address}/channels?{topic_query(topic)}")).get("channels") or []
        answer = await self._ask_all("nsqlookupd", self.lookupds, ask)
        return Answer(sorted({c for channels in answer.value for c in channels}), answer.errors)

    async def lookupd_producers(self) -> Answer:
        async def ask(address):
            return address, (await self._get(f"http://{address}/nodes")).get("producers") or []
        answer = await self._ask_all("nsqlookupd", self.lookupds, ask)
        return Answer(nodes.merge_lookupd_nodes(answer.value), answer.errors)

    async def lookupd_topic_producers(self, topic: str) -> Answer:
        async def ask(address):
            found = (await self._get(f"http://{address}/lookup?{topic_query(topic)}")).get("producers") or []
            return [nodes.producer(raw) for raw in found]
        answer = await self._ask_all("nsqlookupd", self.lookupds, ask)
        return Answer(nodes.union_by_http_address(answer.value), answer.errors)

    # -- nsqd questions -----------------------------------------------------------------

    async def _nsqd_node(self, address: str) -> tuple[dict, dict]:
        """(producer, /stats answer without clients) of the nsqd at ``address``."""
        info, stats = await asyncio.gather(
            self._get_nsqd(f"http://{address}/info"),
            self._get_nsqd(f"http://{address}/stats?format=json&include_clients=false"))
        names = [topic.get("topic_name", "") for topic in stats.get("topics") or []]
        return nodes.nsqd_producer(info, address, names), stats

    async def nsqd_topics(self) -> Answer:
        async def ask(address):
            stats = await self._get_nsqd(f"http://{address}/stats?format=json&include_clients=false")
            return [topic.get("topic_name", "") for topic in stats.get("topics") or []]
        answer = await self._ask_all("nsqd", self.nsqds, ask)
        return Answer(sorted({t for topics in answer.value for t in topics}), answer.errors)

    async def nsqd_producers(self) -> Answer:
        answer = await self._ask_all("nsqd", self.nsqds, self._nsqd_node)
        found = [producer for producer, _ in answer.value]
        nodes.mark_out_of_date(found)
        return Answer(nodes.by_hostname(found), answer.errors)

    async def nsqd_topic_producers(self, topic: str) -> Answer:
        async def ask(address):
            stats = await self._get_nsqd(
                f"http://{address}/stats?format=json&include_clients=false&{topic_query(topic)}")
            names = [t.get("topic_name") for t in stats.get("topics") or []]
            if topic not in names:
                return None
            info = await self._get_nsqd(f"http://{address}/info")
            return nodes.nsqd_producer(info, address, names)
        answer = await self._ask_all("nsqd", self.nsqds, ask)
        return Answer([p for p in answer.value if p is not None], answer.errors)

    # -- either kind --------------------------------------------------------------------

    async def topics(self) -> Answer:
        return await (self.lookupd_topics() if self.lookupds else self.nsqd_topics())

    async def producers(self) -> Answer:
        return await (self.lookupd_producers() if self.lookupds else self.nsqd_producers())

    async def topic_producers(self, topic: str) -> Answer:
        return await (self.lookupd_topic_producers(topic) if self.lookupds else self.nsqd_topic_producers(topic))

    async def nsqd_stats(self, producers: list[dict], topic: str = "", channel: str = "",
                         include_clients: bool = True) -> Answer:
        """Every producer's topic rows (stats.node_topics), one ``/stats`` per producer."""
        stats_query = ""
        if topic:
            stats_query = "&" + topic_query(topic, channel)
        if not include_clients:
            stats_query += "&include_clients=false"

        async def ask(producer):
            node = nodes.http_address(producer)
            stats = await self._get_nsqd(f"http://{node}/stats?format=json{stats_query}")
            return node_topics(stats, node, producer["hostname"], topic)

        answer = await self._ask_all("nsqd", producers, ask)
        return Answer([row for rows in answer.value for row in rows], answer.errors)

    async def channel_peek(self, producers: list[dict], topic: str, channel: str, query: str) -> Answer:
        """Every producer's ``GET /channel/peek`` answer (nsqd --enable-peek), with its ``node`` and
        ``hostname``; a producer without the channel is left out."""
        async def ask(producer):
            node = nodes.http_address(producer)
            try:
                answer = await self._get_nsqd(f"http://{node}/channel/peek?{topic_query(topic, channel)}&{query}")
            except UpstreamError as exc:
                if exc.code in ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND"):
                    return None
                raise
            return {"node": node, "hostname": producer["hostname"], **answer}

        answer = await self._ask_all("nsqd", producers, ask)
        return Answer([row for row in answer.value if row is not None], answer.errors)

    async def cluster_stats(self) -> tuple[list[dict], list[dict], list[str]]:
        """(producers, every topic row without clients, errors) in the fewest requests:
        with nsqd addresses, one round of ``/info`` + ``/stats`` per nsqd."""
        if self.lookupds:
            found = await self.lookupd_producers()
            rows = await self.nsqd_stats(found.value, include_clients=False)
            return found.value, rows.value, found.errors + rows.errors
        answer = await self._ask_all("nsqd", self.nsqds, self._nsqd_node)
        found = [producer for producer, _ in answer.value]
        nodes.mark_out_of_date(found)
        rows = [row for producer, stats in answer.value
                for row in node_topics(stats, nodes.http_address(producer), producer["hostname"])]
        return nodes.by_hostname(found), rows, answer.errors

    async def inactive_topics(self) -> Answer:
        """Topics the lookupds know that no producer serves, each with its channels (``?inactive=true``)."""
        if not self.lookupds:
            return Answer({})
        topics, producers = await asyncio.gather(self.lookupd_topics(), self.lookupd_producers())
        served = nodes.active_topics(producers.value)
        idle = [topic for topic in topics.value if topic not in served]

        async def channels_of(topic):
            try:
                return (await self.lookupd_topic_channels(topic)).value
            except UpstreamFailure:  # as NSQ: a topic whose channels cannot be listed shows none
                return []

        channels = await asyncio.gather(*(channels_of(topic) for topic in idle))
        return Answer(dict(zip(idle, channels)), topics.errors + producers.errors)

    # -- actions ------------------------------------------------------------------------

    async def _post_all(self, urls: list[str], headers: dict[str, str]) -> list[str]:
        async def post(url):
            self.log.debug("CI: posting %s", url)
            await self.upstream.post_v1(url, headers)
        _, errors = await self._gather([post(url) for url in urls])
        return [str(error) for error in errors]

    async def _lookupds_post(self, path: str, query: str) -> list[str]:
        return await self._post_all([f"http://{address}/{path}?{query}" for address in self.lookupds], ACCEPT_V1)

    async def _nsqds_post(self, urls: list[str]) -> list[str]:
        return await self._post_all(urls, self._nsqd_headers)

    async def _producers_post(self, producers: list[dict], path: str, query: str) -> list[str]:
        return await self._nsqds_post([f"http://{nodes.http_address(p)}/{path}?{query}" for p in producers])

    async def create_topic_channel(self, topic: str, channel: str) -> list[str]:
        """With lookupds: registered there, and the channel created on the topic's producers
        (NSQ's way). With nsqd addresses: created on every nsqd (NSQ does nothing)."""
        if not self.lookupds:
            urls = [f"http://{address}/topic/create?{topic_query(topic)}" for address in self.nsqds]
            errors = await self._nsqds_post(urls)
            if channel:
                errors += await self._nsqds_post([f"http://{address}/channel/create?{topic_query(topic, channel)}"
                                                  for address in self.nsqds])
            return errors
        errors = await self._lookupds_post("topic/create", topic_query(topic))
        if channel:
            errors += await self._lookupds_post("channel/create", topic_query(topic, channel))
            try:
                found = await self.lookupd_topic_producers(topic)
            except UpstreamFailure as exc:
                return errors + [str(exc)]
            errors += found.errors
            errors += await self._producers_post(found.value, "channel/create", topic_query(topic, channel))
        return errors

    async def delete_topic(self, topic: str) -> list[str]:
        found = await self.topic_producers(topic)  # first: deleting unregisters them
        errors = found.errors + await self._lookupds_post("topic/delete", topic_query(topic))
        return errors + await self._producers_post(found.value, "topic/delete", topic_query(topic))

    async def delete_channel(self, topic: str, channel: str) -> list[str]:
        found = await self.topic_producers(topic)
        query = topic_query(topic, channel)
        errors = found.errors + await self._lookupds_post("channel/delete", query)
        return errors + await self._producers_post(found.value, "channel/delete", query)

    async def act(self, action: str, topic: str, channel: str = "") -> list[str]:
        """pause, unpause or empty a topic (or a channel) on every nsqd that has it."""
        found = await self.topic_producers(topic)
        path = f"{'channel' if channel else 'topic'}/{action}"
        return found.errors + await self._producers_post(found.value, path, topic_query(topic, channel))

    async def drain_node(self, node: str) -> list[str]:
        """Beyond NSQ: start a drain on the nsqd at ``node`` (nsqd/drain.py); UpstreamFailure if it
        did not take it."""
        url = f"http://{node}/config/drain"
        self.log.debug("CI: putting %s", url)
        try:
            await self.upstream.put_v1(url, b"true", self._nsqd_headers)
        except UpstreamError as exc:
            raise _all_failed("nsqd", [exc]) from exc
        return []

    async def nsqd_draining(self, node: str) -> bool:
        """Whether the nsqd at ``node`` drains (its /info says so); False if it cannot say."""
        try:
            return bool((await self._get_nsqd(f"http://{node}/info")).get("draining"))
        except (UpstreamError, AttributeError):
            return False

    async def pace_channel(self, topic: str, channel: str, rate: int) -> list[str]:
        """Beyond NSQ: the channel's pace on every nsqd that has the topic (nsqd's POST /channel/pace)."""
        found = await self.topic_producers(topic)
        return found.errors + await self._producers_post(found.value, "channel/pace",
                                                         f"{topic_query(topic, channel)}&rate={rate}")

    async def tombstone_node_for_topic(self, topic: str, node: str) -> list[str]:
        """Tombstone ``node`` for ``topic`` on every lookupd, then delete the topic on that nsqd."""
        errors = await self._lookupds_post("topic/tombstone", f"topic={escape(topic)}&node={escape(node)}")
        producer, node_errors = await self._gather([self._nsqd_node(node)])
        errors += map(str, node_errors)
        if producer:
            errors += await self._producers_post([producer[0][0]], "topic/delete", topic_query(topic))
        return errors
