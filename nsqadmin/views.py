"""What each nsqadmin page and API route shows, gathered from the cluster (nsqadmin/http.go handlers).

Each function asks :class:`ClusterInfo` and shapes the answer with the pure functions of
clusterinfo/stats.py and clusterinfo/producers.py; the JSON API dumps the result and the
pages render it, so both always agree. A :class:`Shown` carries the data and the partial
failures met on the way, one group per question that partly failed; :class:`UpstreamFailure`
means nothing answered (the API's 502).
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from clusterinfo import producers as nodes
from clusterinfo import stats
from clusterinfo.cluster import ClusterInfo



class NodeNotFound(LookupError):
    pass


@dataclass
class Shown:
    data: Any
    warnings: list[list[str]] = field(default_factory=list)
    producers_found: bool = True

    def warn(self, errors: list[str]) -> None:
        if errors:
            self.warnings.append(errors)

    @property
    def message(self) -> str:
        """NSQ's ``message``: ``"WARNING: <errors of a question, one per line>; <next question>"``."""
        if not self.warnings:
            return ""
        return "WARNING: " + "; ".join("\n".join(group) for group in self.warnings)

    @property
    def errors(self) -> list[str]:
        return [error for group in self.warnings for error in group]


async def topic_names(ci: ClusterInfo) -> Shown:
    answer = await ci.topics()
    return Shown(answer.value, [answer.errors] if answer.errors else [])


async def inactive_topics(ci: ClusterInfo) -> Shown:
    """``{topic: [channels]}`` for topics the lookupds know but no nsqd produces."""
    answer = await ci.inactive_topics()
    return Shown(answer.value, [answer.errors] if answer.errors else [])


async def _topic_rows(ci: ClusterInfo, shown: Shown, topic: str, channel: str = "",
                      include_clients: bool = False) -> list[dict] | None:
    """Every producer's rows for ``topic``; None when no nsqd produces it."""
    found = await ci.topic_producers(topic)
    shown.warn(found.errors)
    if not found.value:
        return None
    rows = await ci.nsqd_stats(found.value, topic, channel, include_clients)
    shown.warn(rows.errors)
    return rows.value


async def topic(ci: ClusterInfo, name: str) -> Shown:
    """The topic summed over every nsqd that has it, with per-node rows and its channels;
    ``data`` is None when no nsqd produces it."""
    shown = Shown(None)
    rows = await _topic_rows(ci, shown, name)
    if rows is not None:
        shown.data = stats.aggregate_topic(name, rows)
    return shown


async def channel(ci: ClusterInfo, topic_name: str, channel_name: str) -> Shown:
    """The channel summed over nodes, with its clients; ``data`` is None if no nsqd has it.
    ``producers_found`` tells a missing channel from a topic nobody produces."""
    shown = Shown(None)
    rows = await _topic_rows(ci, shown, topic_name, channel_name, include_clients=True)
    channel_rows = stats.channels_by_name(rows or []).get(channel_name)
    if channel_rows:
        shown.data = stats.aggregate_channel(topic_name, channel_name, channel_rows)
    shown.producers_found = rows is not None
    return shown


async def producers(ci: ClusterInfo) -> Shown:
    answer = await ci.producers()
    return Shown(answer.value, [answer.errors] if answer.errors else [])


async def node(ci: ClusterInfo, address: str) -> Shown:
    """One nsqd's topics (with channels and clients) and totals; NodeNotFound if no lookupd knows it."""
    found = await ci.producers()
    shown = Shown(None, [found.errors] if found.errors else [])
    producer = nodes.find(found.value, address)
    if producer is None:
        raise NodeNotFound(address)
    rows, draining = await asyncio.gather(ci.nsqd_stats([producer]), ci.nsqd_draining(address))
    messages, clients = stats.node_totals(rows.value)
    shown.data = {"node": address, "producer": producer, "topics": rows.value,
                  "total_messages": messages, "total_clients": clients, "draining": draining,
                  "drain_messages_left": stats.messages_held(rows.value)}
    return shown


async def known_node(ci: ClusterInfo, address: str) -> None:
    """NodeNotFound unless the cluster lists an nsqd at ``address`` (before acting on it)."""
    if nodes.find((await ci.producers()).value, address) is None:
        raise NodeNotFound(address)


async def counter(ci: ClusterInfo) -> Shown:
    found = await ci.producers()
    shown = Shown(None, [found.errors] if found.errors else [])
    rows = await ci.nsqd_stats(found.value, include_clients=False)
    shown.warn(rows.errors)
    shown.data = stats.counter_stats(rows.value)
    return shown


async def overview(ci: ClusterInfo) -> Shown:
    """The topics page: a summary line per topic, the nodes, and the topics no nsqd produces."""
    found_producers, rows, errors = await ci.cluster_stats()
    shown = Shown(None, [errors] if errors else [])
    grouped = stats.topics_by_name(rows)
    names = set(grouped)
    if ci.lookupds:
        known = await ci.lookupd_topics()
        shown.warn(known.errors)
        names |= set(known.value)
    summaries = [stats.topic_summary(name, grouped.get(name, [])) for name in sorted(names)]
    shown.data = {"topics": summaries, "producers": found_producers}
    return shown
