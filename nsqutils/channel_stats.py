"""nsq_stat's numbers: one channel of a topic, summed over every nsqd that has the topic
(internal/clusterinfo: GetLookupdTopicProducers or GetNSQDTopicProducers, then GetNSQDStats),
asked through the cluster queries nsqadmin uses too (clusterinfo/). As in nsq_stat, an nsqd or nsqlookupd that fails
to answer is fatal, not a warning."""

import logging
from types import SimpleNamespace

from clusterinfo import stats
from clusterinfo.cluster import ClusterInfo, UpstreamFailure
from clusterinfo.upstream import Upstream

from .golog import Fatal


def cluster_info(nsqd_http_addresses: list[str], lookupd_http_addresses: list[str], connect_timeout: float,
                 request_timeout: float) -> ClusterInfo:
    # NSQ's utilities send nsqd no credentials (--http-auth-required is this project's, not NSQ's)
    sources = SimpleNamespace(nsqd_http_address=nsqd_http_addresses, lookupd_http_address=lookupd_http_addresses,
                              nsqd_auth_secret="")
    # its debug lines go to the utility's log, which shows info and above
    return ClusterInfo(Upstream(connect_timeout, request_timeout), sources, logging.getLogger("nsqutils"))


async def fetch_channel(cluster: ClusterInfo, topic: str, channel: str) -> dict:
    """The channel's counters (``depth``, ``memory_depth``, ``backend_depth``, ``in_flight_count``,
    ``deferred_count``, ``requeue_count``, ``timeout_count``, ``message_count``, ``client_count``)."""
    try:
        producers = await cluster.topic_producers(topic)
        if producers.errors:
            raise UpstreamFailure("\n".join(producers.errors))
    except UpstreamFailure as exc:
        raise Fatal(f"ERROR: failed to get topic producers - {exc}") from None
    try:
        rows = await cluster.nsqd_stats(producers.value, topic, channel, include_clients=False)
        if rows.errors:
            raise UpstreamFailure("\n".join(rows.errors))
    except UpstreamFailure as exc:
        raise Fatal(f"ERROR: failed to get nsqd stats - {exc}") from None
    channel_rows = stats.channels_by_name(rows.value).get(channel)
    if not channel_rows:
        raise Fatal(f"ERROR: failed to find channel({channel}) in stats metadata for topic({topic})")
    return stats.aggregate_channel(topic, channel, channel_rows)
