"""GET /metrics: nsqd's stats in the Prometheus text exposition format (version 0.0.4).

Not part of NSQ: the same numbers as /stats (and statsd), under Prometheus names. Counts
that only grow are ``*_total`` counters (they restart from 0 if a topic or channel is
deleted and created again, which Prometheus reads as a counter reset); the rest are
gauges. End-to-end latency is a gauge per configured quantile, in seconds, over NSQ's
sliding window: it is not a Prometheus summary, whose ``_count`` and ``_sum`` would have
to grow forever. Topic and channel names need no escaping: NSQ allows only
``[.a-zA-Z0-9_-]`` and ``#ephemeral`` in them.
"""

import functools

from common import VERSION

from . import stats
from .chunks import TOPICS_A_CHUNK, Chunks
from .slices import Steps, released_steps

CONTENT_TYPE = ("Content-Type", "text/plain; version=0.0.4; charset=utf-8")

TOPIC_METRICS = (
    ("nsq_topic_depth", "gauge", "depth", "Messages queued in the topic, in memory and on disk."),
    ("nsq_topic_backend_depth", "gauge", "backend_depth", "Messages queued in the topic on disk."),
    ("nsq_topic_messages_total", "counter", "message_count", "Messages published to the topic."),
    ("nsq_topic_message_bytes_total", "counter", "message_bytes", "Bytes of message bodies published to the topic."),
    ("nsq_topic_paused", "gauge", "paused", "1 if the topic is paused."),
)
CHANNEL_METRICS = (
    ("nsq_channel_depth", "gauge", "depth", "Messages queued in the channel, in memory and on disk."),
    ("nsq_channel_backend_depth", "gauge", "backend_depth", "Messages queued in the channel on disk."),
    ("nsq_channel_in_flight_messages", "gauge", "in_flight_count", "Messages delivered and not yet finished."),
    ("nsq_channel_deferred_messages", "gauge", "deferred_count", "Messages waiting for their delay to pass."),
    ("nsq_channel_messages_total", "counter", "message_count", "Messages the channel received from its topic."),
    ("nsq_channel_requeues_total", "counter", "requeue_count", "Messages requeued (REQ, or the client left)."),
    ("nsq_channel_timeouts_total", "counter", "timeout_count", "Messages requeued because their timeout passed."),
    ("nsq_channel_clients", "gauge", "client_count", "Consumers subscribed to the channel."),
    ("nsq_channel_paused", "gauge", "paused", "1 if the channel is paused."),
)
# The opt-in features beyond NSQ: a family only for the topics and channels whose /stats has its key.
BEYOND_TOPIC_METRICS = (
    ("nsq_topic_msg_ttl_seconds", "gauge", "msg_ttl", 1e-3, "The topic's message TTL (0: none)."),
    ("nsq_topic_expired_total", "counter", "expired_count", 1,
     "Messages dropped from the topic's own queue for being older than its TTL."),
    ("nsq_topic_max_queue_bytes", "gauge", "max_queue_bytes", 1,
     "Bytes of messages the topic's queue and each of its channels' may hold (0: no bound)."),
    ("nsq_topic_queue_bytes", "gauge", "queue_bytes", 1, "Bytes of messages in the topic's own queue, memory and disk."),
    ("nsq_topic_queue_dropped_total", "counter", "dropped_count", 1,
     "Messages dropped from the topic's own queue to make room (--queue-full=drop-oldest)."),
    ("nsq_topic_queue_refused_total", "counter", "refused_count", 1,
     "Messages refused because a queue of the topic was full (--queue-full=refuse)."),
)
BEYOND_CHANNEL_METRICS = (
    ("nsq_channel_expired_total", "counter", "expired_count", 1,
     "Messages dropped before delivery for being older than the topic's TTL."),
    ("nsq_channel_max_attempts", "gauge", "max_attempts", 1,
     "Deliveries a message may have on the channel before it is dead-lettered (0: no limit)."),
    ("nsq_channel_dead_letters_total", "counter", "dead_letter_count", 1,
     "Messages moved to the topic's dead-letter topic after max_attempts deliveries."),
    ("nsq_channel_pace", "gauge", "pace", 1, "Messages a second the channel delivers at most (shown while paced)."),
    ("nsq_channel_queue_bytes", "gauge", "queue_bytes", 1, "Bytes of messages in the channel's queue, memory and disk."),
    ("nsq_channel_queue_dropped_total", "counter", "dropped_count", 1,
     "Messages dropped from the channel's queue to make room (--queue-full=drop-oldest)."),
)
# --processing-time-percentile: gauges over the latency window, for the channels whose /stats has the key
PROCESSING_COUNTS = (
    ("nsq_channel_processing_time_finishes", "count", "FINs in the latency window (the percentiles' samples)."),
    ("nsq_channel_processing_time_requeues", "requeue_count", "REQs in the latency window."),
    ("nsq_channel_processing_time_timeouts", "timeout_count", "Timeouts in the latency window."),
)
ROWS_A_STEP = 200
LATENCY_HELP = "End-to-end processing latency (publish to FIN) at a quantile, over the latency window."


def exposition_steps(nsqd, shown_topics=None) -> Steps[list[bytes]]:
    """The whole /metrics page (of the topics ``shown_topics`` allows, if given), encoded, in steps of
    a topic or ROWS_A_STEP rows (nsqd/slices.py), as the chunks it was built in (nsqd/chunks.py)."""
    document = yield from stats.stats_document_steps(nsqd, "", "", include_clients=False, include_mem=True,
                                                     shown_topics=shown_topics)
    topics = document["topics"]
    channels, topic_keys, channel_keys = yield from _rows_steps(topics)
    out = Chunks()  # a chunk a step: joining and encoding 12 MB at the end held the loop 25 ms
    family = functools.partial(_family, out)
    yield from family("nsq_info", "gauge", "nsqd's version; always 1.", [(f'version="{VERSION}"', 1)])
    yield from family("nsq_healthy", "gauge", "1 if nsqd is healthy (GET /ping answers OK).",
                      [("", int(nsqd.is_healthy()))])
    yield from family("nsq_clients", "gauge", "TCP client connections.", [("", len(nsqd.connections))])
    for name, kind, key, text in TOPIC_METRICS:
        yield from family(name, kind, text, topics, lambda topic: [(_topic_labels(topic), int(topic[key]))])
    yield from family("nsq_topic_e2e_processing_latency_seconds", "gauge", LATENCY_HELP + " Merged over the channels.",
                      topics, lambda topic: _latency(_topic_labels(topic), topic))
    for name, kind, key, text in CHANNEL_METRICS:
        yield from family(name, kind, text, channels,
                          lambda pair: [(_channel_labels(*pair), int(pair[1][key]))])
    yield from family("nsq_channel_e2e_processing_latency_seconds", "gauge", LATENCY_HELP,
                      channels, lambda pair: _latency(_channel_labels(*pair), pair[1]))
    for name, kind, key, scale, text in BEYOND_TOPIC_METRICS:
        if key in topic_keys:
            yield from family(name, kind, text, topics,
                              lambda topic: [(_topic_labels(topic), _number(topic[key] * scale))] if key in topic else [])
    if "processing_time" in channel_keys:
        yield from _processing_time(family, [(topic, channel) for topic, channel in channels
                                             if "processing_time" in channel])
    for name, kind, key, scale, text in BEYOND_CHANNEL_METRICS:
        if key in channel_keys:
            yield from family(name, kind, text, channels,
                              lambda pair: [(_channel_labels(*pair), _number(pair[1][key] * scale))]
                              if key in pair[1] else [])
    if "draining" in document:  # beyond NSQ (nsqd/drain.py)
        yield from family("nsq_draining", "gauge", "1 while nsqd drains (it exits once nothing is left).", [("", 1)])
        yield from family("nsq_drain_messages_left", "gauge",
                          "Messages the draining nsqd still holds: queued, in flight and deferred.",
                          [("", document["drain_messages_left"])])
    memory = document["memory"]
    yield from family("process_resident_memory_bytes", "gauge", "Resident memory of the nsqd process.",
                      [("", memory["heap_in_use_bytes"])])
    yield from family("process_start_time_seconds", "gauge", "When nsqd started, in seconds since the epoch.",
                      [("", nsqd.start_time)])
    yield from family("nsq_heap_objects", "gauge", "Memory blocks the Python allocator has handed out.",
                      [("", memory["heap_objects"])])
    yield from family("nsq_gc_runs_total", "counter", "Python garbage collector runs.",
                      [("", memory["gc_total_runs"])])
    yield from released_steps(channels, TOPICS_A_CHUNK)  # freed at once, they held the loop for milliseconds
    yield from released_steps(topics, TOPICS_A_CHUNK)
    return out.done()


def _rows_steps(topics: list[dict]) -> Steps[tuple[list[tuple[dict, dict]], set[str], set[str]]]:
    """Every (topic, channel) pair, and the keys of any topic and of any channel (which families
    beyond NSQ's to write), ROWS_A_STEP topics a step: over 20,000 channels at once, 17 ms."""
    channels: list[tuple[dict, dict]] = []
    topic_keys: set[str] = set()
    channel_keys: set[str] = set()
    for count, topic in enumerate(topics, 1):
        topic_keys.update(topic)
        for channel in topic["channels"]:
            channels.append((topic, channel))
            channel_keys.update(channel)
        if count % ROWS_A_STEP == 0:
            yield
    return channels, topic_keys, channel_keys


def _family(out: Chunks, name: str, kind: str, text: str, rows, samples_of=None) -> Steps[None]:
    """A family's lines into ``out``: ``samples_of(row)`` (labels, value) for each row (or the rows
    are the samples), a step every ROWS_A_STEP rows."""
    out.add(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
    for count, row in enumerate(rows, 1):
        for labels, value in samples_of(row) if samples_of else (row,):
            out.add(f"{name}{{{labels}}} {value}\n" if labels else f"{name} {value}\n")
        if count % ROWS_A_STEP == 0:
            out.cut()
            yield


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _topic_labels(topic: dict) -> str:
    return f'topic="{topic["topic_name"]}"'


def _channel_labels(topic: dict, channel: dict) -> str:
    return f'topic="{topic["topic_name"]}",channel="{channel["channel_name"]}"'


def _latency(labels: str, stats_entry: dict, key: str = "e2e_processing_latency") -> list[tuple[str, float]]:
    return [(f'{labels},quantile="{item["quantile"]}"', item["value"] / 1e9)
            for item in stats_entry[key]["percentiles"] or []]


def _processing_time(family, channels: list[tuple[dict, dict]]) -> Steps[None]:
    yield from family("nsq_channel_processing_time_seconds", "gauge",
                      "Time from a delivery to its FIN at a quantile, over the latency window.",
                      channels, lambda pair: _latency(_channel_labels(*pair), pair[1], "processing_time"))
    for name, key, text in PROCESSING_COUNTS:
        yield from family(name, "gauge", text, channels,
                          lambda pair: [(_channel_labels(*pair), pair[1]["processing_time"][key])])
