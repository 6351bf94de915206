"""nsqd's /stats document, in NSQ v1.3's JSON shape and text layout (nsqd/stats.go, http.go).

Every key of NSQ's TopicStats, ChannelStats and ClientV2Stats is present with the same
type; Go's ``omitempty`` keys (authed, auth_identity, auth_identity_url, pub_counts) are
left out when empty, as Go leaves them out. The memory block reports the Python runtime
under Go's key names: allocated blocks, RSS, and collector pauses measured here.

``e2e_processing_latency`` is NSQ's quantile.Result: a channel's own stream, and for a
topic the merge of its channels' streams (null percentiles for a topic with none, as
NSQ's nil aggregate gives). The text format prints the values as stringy's
NanoSecondToHuman does.
"""

import gc
import os
import sys
import time
from datetime import datetime, timezone

from common import VERSION, gojson
from common.goflags import format_duration

from .chunks import TOPICS_A_CHUNK, Chunks
from .quantile import merged_result
from .slices import Steps, at_once, released_steps

try:
    import resource
except ImportError:  # Windows
    resource = None

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class GCPauses:
    """Collector pause times, recorded through gc.callbacks (Go reports its GC pauses)."""

    def __init__(self, keep: int = 256):
        self.keep = keep
        self.pauses_us: list[int] = []
        self.runs = 0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.runs += 1
        self.pauses_us.append(int((time.perf_counter() - self._started) * 1e6))
        del self.pauses_us[:-self.keep]

    def percentile(self, fraction: float) -> int:
        if not self.pauses_us:
            return 0
        ordered = sorted(self.pauses_us)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _rss_bytes() -> int:
    """The resident set size (Linux's /proc); elsewhere the largest it has been, from
    getrusage (in bytes on macOS, KiB on the BSDs), or 0 where neither exists (Windows)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE_SIZE
    except OSError:
        pass
    if resource is None:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class AllocatedBlocks:
    """sys.getallocatedblocks(), counted at most every REFRESH seconds: it walks every pool of the
    allocator, 3.5-8 ms of the loop in a daemon serving 10,000 topics x 2 channels (Go's nsqd reads its
    heap_objects from runtime.ReadMemStats at once). Between counts /stats repeats the last one; a full
    collection since (POST /debug/freememory's) makes it count again."""

    REFRESH = 5.0

    def __init__(self):
        self.counted_at = -self.REFRESH
        self.full_collections = -1
        self.count = 0

    def value(self) -> int:
        now, full_collections = time.monotonic(), gc.get_stats()[2]["collections"]
        if now - self.counted_at >= self.REFRESH or full_collections != self.full_collections:
            self.count, self.counted_at, self.full_collections = sys.getallocatedblocks(), now, full_collections
        return self.count


_allocated_blocks = AllocatedBlocks()


def memory_stats(pauses: GCPauses) -> dict:
    return {
        "heap_objects": _allocated_blocks.value(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _rss_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": max(pauses.pauses_us, default=0),
        "gc_pause_usec_99": pauses.percentile(0.99),
        "gc_pause_usec_95": pauses.percentile(0.95),
        "next_gc_bytes": 0,
        "gc_total_runs": pauses.runs,
    }


def e2e_latency(streams: list, now_ns: int) -> dict:
    """NSQ's quantile.Result JSON of the merged ``streams``; no streams, no percentiles."""
    if not streams:
        return {"count": 0, "percentiles": None}
    result = merged_result(streams, now_ns)
    return {"count": result.count,
            "percentiles": [{"quantile": _go_float(quantile), "value": value}
                            for quantile, value in result.percentiles]}


def _go_float(value: float) -> float | int:
    """Go's encoding/json writes an integral float64 without a fraction (1, not 1.0)."""
    return int(value) if value.is_integer() else value


def client_stats(client, topic_filter: str, shown_topics=None) -> dict:
    stats = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": int(client.state),
        "ready_count": client.ready_count,
        "in_flight_count": len(client.in_flight),
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": client.compression == "deflate",
        "snappy": client.compression == "snappy",
        "user_agent": client.user_agent,
    }
    auth = client.auth_state
    if client.authed:
        stats["authed"] = True
    if auth is not None and auth.identity:
        stats["auth_identity"] = auth.identity
    if auth is not None and auth.identity_url:
        stats["auth_identity_url"] = auth.identity_url
    pub_counts = [{"topic": topic, "count": count} for topic, count in client.pub_counts.items()
                  if (not topic_filter or topic == topic_filter) and (shown_topics is None or shown_topics(topic))]
    if pub_counts:
        stats["pub_counts"] = pub_counts
    tls = client.tls
    stats.update({
        "tls": tls is not None,
        "tls_cipher_suite": tls.cipher_suite if tls else "",
        "tls_version": tls.version if tls else "",
        "tls_negotiated_protocol": tls.negotiated_protocol if tls else "",
        "tls_negotiated_protocol_is_mutual": tls is not None,  # Go: always true since Go 1.16
    })
    return stats


def channel_stats(channel, include_clients: bool, topic_filter: str, now_ns: int, shown_topics=None) -> dict:
    clients = ([client_stats(client, topic_filter, shown_topics) for client in channel.clients.values()]
               if include_clients else None)
    return {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend_depth,
        "in_flight_count": channel.in_flight_count,
        "deferred_count": channel.deferred_count,
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(channel.clients),
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": e2e_latency([channel.e2e_latency] if channel.e2e_latency else [], now_ns),
        **({"processing_time": channel.processing_time.stats()} if channel.processing_time is not None else {}),
        **channel.topic.nsqd.message_ttl.channel_stats(channel),
        **channel.topic.nsqd.dead_letters.channel_stats(channel),
        **channel.topic.nsqd.pacing.channel_stats(channel),
        **channel.topic.nsqd.queue_bounds.channel_stats(channel),
    }


def topic_stats(topic, channel_filter: str, include_clients: bool, topic_filter: str, now_ns: int,
                shown_topics=None) -> dict | None:
    names = sorted(topic.channels)
    if channel_filter:
        if channel_filter not in topic.channels:
            return None
        names = [channel_filter]
    return {
        "topic_name": topic.name,
        "channels": [channel_stats(topic.channels[name], include_clients, topic_filter, now_ns, shown_topics)
                     for name in names],
        "depth": topic.depth,
        "backend_depth": topic.backend_depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": e2e_latency(
            [channel.e2e_latency for channel in topic.channels.values() if channel.e2e_latency], now_ns),
        **topic.nsqd.message_ttl.topic_stats(topic),
        **topic.nsqd.queue_bounds.topic_stats(topic),
    }


def stats_document(nsqd, topic_filter: str, channel_filter: str, include_clients: bool,
                   include_mem: bool, shown_topics=None) -> dict:
    """The /stats?format=json answer, keys in NSQ's order. A topic filter that matches no
    topic leaves topics and producers null; otherwise every client that has published is a
    producer, its pub_counts narrowed to the filtered topic (nsqd's GetStats).
    ``shown_topics(name)``, if given, hides the other topics as if they did not exist
    (--http-auth-required: the caller's grants)."""
    return at_once(stats_document_steps(nsqd, topic_filter, channel_filter, include_clients, include_mem,
                                        shown_topics))


def stats_document_steps(nsqd, topic_filter: str, channel_filter: str, include_clients: bool,
                         include_mem: bool, shown_topics=None) -> Steps[dict]:
    """``stats_document`` a topic at a time (nsqd/slices.py); a topic deleted meanwhile is left out."""
    # read before the topics are: with their answer built, the allocator's blocks took 2-5 ms to count
    memory = memory_stats(nsqd.gc_pauses) if include_mem else None
    topics = producers = None
    hidden = shown_topics is not None and topic_filter and not shown_topics(topic_filter)
    if not hidden and (not topic_filter or topic_filter in nsqd.topics):
        names = [topic_filter] if topic_filter else sorted(nsqd.topics)
        if shown_topics is not None:
            names = [name for name in names if shown_topics(name)]
        now_ns = time.time_ns()
        topics = []
        for name in names:
            topic = nsqd.topics.get(name)
            stats = None if topic is None else topic_stats(topic, channel_filter, include_clients, topic_filter,
                                                           now_ns, shown_topics)
            if stats is not None:
                topics.append(stats)
            yield
        if include_clients:
            producers = [stats for stats in (client_stats(conn.client, topic_filter, shown_topics)
                                             for conn in list(nsqd.connections) if conn.client.pub_counts)
                         if shown_topics is None or "pub_counts" in stats]
    document = {"version": VERSION, "health": nsqd.health, "start_time": nsqd.start_time, "topics": topics}
    if include_mem:
        document["memory"] = memory
    document["producers"] = producers or None
    if nsqd.draining:  # beyond NSQ (nsqd/drain.py)
        document |= nsqd.drain.stats()
    return document


def encoded_steps(document_steps: Steps[dict], encode_steps, *args) -> Steps:
    """The document of ``document_steps``, then ``encode_steps(document, *args)``: one work in slices, so
    the document is never there while the collector runs (nsqd/slices.py)."""
    document = yield from document_steps
    encoded = yield from encode_steps(document, *args)
    # freed at once, 10,000 topics held the loop 10 ms; a thousand at a time, 3-4 ms a step
    yield from released_steps(document["topics"] or [], TOPICS_A_CHUNK)
    return encoded


def json_steps(document: dict) -> Steps[list[bytes]]:
    """gojson.dumps(document), the same bytes, a topic at a time, as chunks of TOPICS_A_CHUNK topics
    (nsqd/chunks.py): never joined (each copy of a 6 MB answer costs milliseconds)."""
    out = Chunks(text=False)
    out.add(b"{")
    for number, (key, value) in enumerate(document.items()):
        out.add(b"," if number else b"")
        if key != "topics" or value is None:
            out.add(gojson.dumps(key) + b":" + gojson.dumps(value))
            continue
        out.add(b'"topics":[')
        for index, topic in enumerate(value):
            out.extend((b"," if index else b"", gojson.dumps(topic)))
            out.topic_done(index)
            yield
        out.add(b"]")
    out.add(b"}")
    return out.done()


def _rfc3339(unix_seconds: int) -> str:
    stamp = datetime.fromtimestamp(unix_seconds, timezone.utc).astimezone()
    text = stamp.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def nanoseconds_to_human(value: float) -> str:
    """stringy.NanoSecondToHuman: one decimal in the largest unit the value exceeds."""
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > scale:
            return f"{value / scale:.1f}{suffix}"
    return f"{value:.1f}ns"


def _e2e_text(latency: dict) -> str:
    return ", ".join(nanoseconds_to_human(item["value"]) for item in latency["percentiles"] or [])


def _client_line(stats: dict, now: float) -> str:
    connected = format_duration(int(now - stats["connect_ts"]))
    port = stats["remote_address"].rsplit(":", 1)[-1]
    ident = f"{stats['hostname']}:{port} {stats['user_agent']}"
    if stats.get("pub_counts"):
        total = sum(item["count"] for item in stats["pub_counts"])
        topics = ",".join(f"{item['topic']}={item['count']}" for item in stats["pub_counts"])
        return f"[V2 {ident:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (f"[V2 {ident:<21}] state: {stats['state']} inflt: {stats['in_flight_count']:<4} "
            f"rdy: {stats['ready_count']:<4} fin: {stats['finish_count']:<8} re-q: {stats['requeue_count']:<8} "
            f"msgs: {stats['message_count']:<8} connected: {connected}")


def stats_text(document: dict, now: float) -> str:
    """The plain-text /stats, with nsqd's exact layout."""
    return b"".join(at_once(stats_text_steps(document, now))).decode()


def stats_text_steps(document: dict, now: float) -> Steps[list[bytes]]:
    """``stats_text`` encoded, a topic at a time, as chunks of TOPICS_A_CHUNK topics (nsqd/chunks.py)."""
    out = Chunks()
    out.extend([f"nsqd v{VERSION} (built w/python{sys.version.split()[0]})\n",
                f"start_time {_rfc3339(document['start_time'])}\n",
                f"uptime {format_duration(now - document['start_time'])}\n",
                f"\nHealth: {document['health']}\n"])
    if "draining" in document:
        out.add(f"Draining: {document['drain_messages_left']} messages left\n")
    if "memory" in document:
        out.add("\nMemory:\n")
        out.extend([f"   {key:<25}\t{value}\n" for key, value in document["memory"].items()])
    topics = document["topics"] or []
    out.add("\nTopics:" if topics else "\nTopics: None\n")
    for number, topic in enumerate(topics):
        prefix = "*P " if topic["paused"] else "   "
        out.add(f"\n{prefix}[{topic['topic_name']:<15}] depth: {topic['depth']:<5} "
                f"be-depth: {topic['backend_depth']:<5} msgs: {topic['message_count']:<8} "
                f"e2e%: {_e2e_text(topic['e2e_processing_latency'])}\n")
        for channel in topic["channels"]:
            prefix = "   *P " if channel["paused"] else "      "
            out.add(f"{prefix}[{channel['channel_name']:<25}] depth: {channel['depth']:<5} "
                    f"be-depth: {channel['backend_depth']:<5} inflt: {channel['in_flight_count']:<4} "
                    f"def: {channel['deferred_count']:<4} re-q: {channel['requeue_count']:<5} "
                    f"timeout: {channel['timeout_count']:<5} msgs: {channel['message_count']:<8} "
                    f"e2e%: {_e2e_text(channel['e2e_processing_latency'])}\n")
            out.extend([f"        {_client_line(client, now)}\n" for client in channel["clients"] or []])
        out.topic_done(number)
        yield
    producers = document["producers"] or []
    if producers:
        out.add("\nProducers:\n")
        out.extend([f"   {_client_line(client, now)}\n" for client in producers])
    else:
        out.add("\nProducers: None\n")
    return out.done()
