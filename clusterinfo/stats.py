"""Topic, channel and client stats across a cluster (internal/clusterinfo/types.go, quantile/aggregate.go).

Pure functions over the JSON of each nsqd's ``/stats?format=json``: no network here.

Theory of operation. Every nsqd reports its own topics, channels and clients; nsqadmin
names each row by the node it came from (``node`` = the nsqd's HTTP address, with the
producer's ``hostname``) and adds ``memory_depth`` (= depth - backend_depth). A row
summed over nodes has ``node: "*"`` and an empty hostname, carries the per-node rows
in ``nodes`` (sorted by hostname) and, for a channel, every node's clients (sorted by
hostname). Counters and depths add up; ``paused`` is true if any node is paused.

End-to-end latency percentiles (NSQ's E2eProcessingLatencyAggregate) are combined per
quantile: ``count`` adds up, ``min``/``max`` are the smallest and largest node values,
and ``average`` is the node values' mean weighted by each node's message count. (Go's
``min`` keeps the last node's ``max``; here it is the true minimum.) A per-node entry
also keeps its ``value``; the keys of an entry are sorted, as Go marshals a map.

The dicts carry NSQ's keys in NSQ's order, so the JSON API dumps them as they are,
plus two keys NSQ's nsqadmin drops although nsqd reports them: a topic's
``message_bytes`` and a client's ``state``. The keys of the opt-in features beyond NSQ
(README "Beyond NSQ") follow, only where some nsqd reports them: counts add up; a setting
across nodes is their common value, or None when they differ. A channel's ``processing_time``
(delivery to FIN) combines as the e2e latency does, its REQ and timeout counts added up.
"""

import time

TOPIC_COUNTERS = ("depth", "memory_depth", "backend_depth", "message_count", "message_bytes")
CHANNEL_COUNTERS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count",
                    "requeue_count", "timeout_count", "message_count", "client_count")
CLIENT_TEXT = ("remote_address", "version", "client_id", "hostname", "user_agent")
CLIENT_COUNTS = ("in_flight_count", "ready_count", "finish_count", "requeue_count", "message_count", "sample_rate")
CLIENT_FLAGS = ("deflate", "snappy", "authed")
CLIENT_IDENTITY = ("auth_identity", "auth_identity_url")
CLIENT_TLS = ("tls_cipher_suite", "tls_version", "tls_negotiated_protocol")
TOPIC_EXTRA_COUNTS = ("expired_count", "queue_bytes", "dropped_count", "refused_count")
TOPIC_EXTRA_SETTINGS = ("msg_ttl", "max_queue_bytes", "queue_full")
CHANNEL_EXTRA_COUNTS = ("expired_count", "dead_letter_count", "queue_bytes", "dropped_count")
CHANNEL_EXTRA_SETTINGS = ("max_attempts", "dead_letter_topic", "pace", "max_queue_bytes")
EXTRA_TEXT = ("dead_letter_topic", "queue_full")


def _int(raw: dict, key: str) -> int:
    value = raw.get(key)
    if value is None:
        return 0
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    raise ValueError(f"json: cannot unmarshal {value!r} into field {key} of type int64")


def _text(raw: dict, key: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise ValueError(f"json: cannot unmarshal {value!r} into field {key} of type string")


def _number(value: float) -> float | int:
    """How Go writes a float64: integral values without a fraction."""
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


def _by_hostname(rows: list[dict]) -> list[dict]:
    """NSQ's order; rows of one hostname by node (and a client's address), where Go's order is random."""
    return sorted(rows, key=lambda row: (row["hostname"], row["node"], row.get("remote_address", "")))


def _node_extras(raw: dict, keys: tuple[str, ...]) -> dict:
    return {key: _text(raw, key) if key in EXTRA_TEXT else _int(raw, key) for key in keys if key in raw}


def _combined_extras(rows: list[dict], counts: tuple[str, ...], settings: tuple[str, ...]) -> dict:
    combined = {}
    for key in counts:
        if any(key in row for row in rows):
            combined[key] = sum(row.get(key, 0) for row in rows)
    for key in settings:
        values = {row[key] for row in rows if key in row}
        if values:
            combined[key] = values.pop() if len(values) == 1 else None
    return combined


# -- one node's rows -------------------------------------------------------------------------


def node_e2e(raw: dict | None) -> dict:
    """A node's e2e latency block, each percentile with min = max = average = its value."""
    raw = raw or {}
    count = _int(raw, "count")
    percentiles = None
    if raw.get("percentiles") is not None:
        percentiles = []
        for entry in raw["percentiles"]:
            quantile, value = float(entry.get("quantile", 0)), float(entry.get("value", 0))
            value = _number(value)
            percentiles.append({"average": value, "count": count, "max": value, "min": value,
                                "quantile": _number(quantile), "value": value})
    return {"count": count, "percentiles": percentiles, "topic": "", "channel": "", "host": ""}


def node_processing_time(raw: dict) -> dict:
    """A node's delivery-to-FIN block (--processing-time-percentile): an e2e block, and its
    window's REQ and timeout counts."""
    return {**node_e2e(raw), "requeue_count": _int(raw, "requeue_count"), "timeout_count": _int(raw, "timeout_count")}


def client_row(raw: dict, node: str, now: float) -> dict:
    """A client as nsqadmin shows it: nsqd's fields, the node, and ``connected`` (ns since connect_ts)."""
    connect_ts = _int(raw, "connect_ts")
    row = {"node": node}
    for key in CLIENT_TEXT:
        row[key] = _text(raw, key)
    row["connect_ts"] = connect_ts
    row["connected"] = (int(now) - connect_ts) * 1_000_000_000
    for key in CLIENT_COUNTS:
        row[key] = _int(raw, key)
    for key in CLIENT_FLAGS:
        row[key] = bool(raw.get(key))
    for key in CLIENT_IDENTITY:
        row[key] = _text(raw, key)
    row["tls"] = bool(raw.get("tls"))
    for key in CLIENT_TLS:
        row[key] = _text(raw, key)
    row["tls_negotiated_protocol_is_mutual"] = bool(raw.get("tls_negotiated_protocol_is_mutual"))
    row["state"] = _int(raw, "state")
    return row


def node_channel(raw: dict, node: str, hostname: str, topic_name: str, now: float) -> dict:
    depth, backend = _int(raw, "depth"), _int(raw, "backend_depth")
    clients = raw.get("clients")
    return {
        "node": node, "hostname": hostname, "topic_name": topic_name,
        "channel_name": _text(raw, "channel_name"),
        "depth": depth, "memory_depth": depth - backend, "backend_depth": backend,
        "in_flight_count": _int(raw, "in_flight_count"), "deferred_count": _int(raw, "deferred_count"),
        "requeue_count": _int(raw, "requeue_count"), "timeout_count": _int(raw, "timeout_count"),
        "message_count": _int(raw, "message_count"), "client_count": _int(raw, "client_count"),
        "nodes": None,
        "clients": None if clients is None else [client_row(c, node, now) for c in clients],
        "paused": bool(raw.get("paused")),
        "e2e_processing_latency": node_e2e(raw.get("e2e_processing_latency")),
        **_node_extras(raw, CHANNEL_EXTRA_COUNTS + CHANNEL_EXTRA_SETTINGS),
        **({"processing_time": node_processing_time(raw["processing_time"])} if "processing_time" in raw else {}),
    }


def node_topic(raw: dict, node: str, hostname: str, now: float) -> dict:
    """One nsqd's row for a topic, with its channels' rows."""
    name = _text(raw, "topic_name")
    depth, backend = _int(raw, "depth"), _int(raw, "backend_depth")
    channels = raw.get("channels")
    return {
        "node": node, "hostname": hostname, "topic_name": name,
        "depth": depth, "memory_depth": depth - backend, "backend_depth": backend,
        "message_count": _int(raw, "message_count"), "message_bytes": _int(raw, "message_bytes"),
        "nodes": None,
        "channels": None if channels is None else [node_channel(c, node, hostname, name, now) for c in channels],
        "paused": bool(raw.get("paused")),
        "e2e_processing_latency": node_e2e(raw.get("e2e_processing_latency")),
        **_node_extras(raw, TOPIC_EXTRA_COUNTS + TOPIC_EXTRA_SETTINGS),
    }


def node_topics(stats: dict, node: str, hostname: str, selected_topic: str = "", now: float | None = None) -> list[dict]:
    """Rows for the topics in one nsqd's ``/stats`` answer (only ``selected_topic`` if given)."""
    if not isinstance(stats, dict):
        raise ValueError("json: cannot unmarshal stats: not an object")
    now = time.time() if now is None else now
    rows = []
    for raw in stats.get("topics") or []:
        if selected_topic and raw.get("topic_name") != selected_topic:
            continue
        rows.append(node_topic(raw, node, hostname, now))
    return rows


# -- across nodes ----------------------------------------------------------------------------


def aggregate_e2e(parts: list[dict], topic: str, channel: str = "") -> dict:
    """Nodes' e2e blocks combined per quantile (in the order quantiles first appear)."""
    merged: dict[float, list[dict]] = {}
    for part in parts:
        for entry in part["percentiles"] or ():
            merged.setdefault(entry["quantile"], []).append(entry)
    percentiles = None
    if merged:
        percentiles = []
        for quantile, entries in merged.items():
            count = sum(e["count"] for e in entries)
            average = sum(e["average"] * e["count"] for e in entries) / count if count else 0
            percentiles.append({"average": _number(float(average)), "count": count,
                                "max": max(e["max"] for e in entries), "min": min(e["min"] for e in entries),
                                "quantile": quantile})
    return {"count": sum(part["count"] for part in parts), "percentiles": percentiles,
            "topic": topic, "channel": channel, "host": "*" if parts else ""}


def aggregate_channel(topic_name: str, channel_name: str, rows: list[dict]) -> dict:
    """One channel summed over its per-node rows."""
    rows = _by_hostname(rows)
    total = {"node": "*" if rows else "", "hostname": "", "topic_name": topic_name, "channel_name": channel_name}
    for key in CHANNEL_COUNTERS:
        total[key] = sum(row[key] for row in rows)
    total["nodes"] = rows
    # Go appends every node's clients to a nil list: null when there are none, even if nodes said []
    total["clients"] = _by_hostname([c for row in rows for c in row["clients"] or ()]) or None
    total["paused"] = any(row["paused"] for row in rows)
    total["e2e_processing_latency"] = aggregate_e2e([row["e2e_processing_latency"] for row in rows],
                                                    topic_name, channel_name)
    total.update(_combined_extras(rows, CHANNEL_EXTRA_COUNTS, CHANNEL_EXTRA_SETTINGS))
    timed = [row["processing_time"] for row in rows if "processing_time" in row]
    if timed:
        total["processing_time"] = {**aggregate_e2e(timed, topic_name, channel_name),
                                    **{key: sum(part[key] for part in timed) for key in ("requeue_count", "timeout_count")}}
    return total


def channels_by_name(topic_rows: list[dict]) -> dict[str, list[dict]]:
    """Every node's channel rows of these topic rows, grouped by channel name."""
    grouped: dict[str, list[dict]] = {}
    for topic in topic_rows:
        for channel in topic["channels"] or ():
            grouped.setdefault(channel["channel_name"], []).append(channel)
    return grouped


def aggregate_topic(topic_name: str, rows: list[dict]) -> dict:
    """One topic summed over its per-node rows, with its channels summed over nodes (sorted by name)."""
    rows = _by_hostname(rows)
    total = {"node": "*" if rows else "", "hostname": "", "topic_name": topic_name}
    for key in TOPIC_COUNTERS:
        total[key] = sum(row[key] for row in rows)
    total["nodes"] = rows or None
    grouped = channels_by_name(rows)
    total["channels"] = [aggregate_channel(topic_name, name, grouped[name]) for name in sorted(grouped)] or None
    total["paused"] = any(row["paused"] for row in rows)
    total["e2e_processing_latency"] = aggregate_e2e([row["e2e_processing_latency"] for row in rows], topic_name)
    total.update(_combined_extras(rows, TOPIC_EXTRA_COUNTS, TOPIC_EXTRA_SETTINGS))
    return total


def topics_by_name(topic_rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in topic_rows:
        grouped.setdefault(row["topic_name"], []).append(row)
    return grouped


def all_channels(topic_rows: list[dict]) -> dict[str, dict]:
    """Every channel of every topic summed over nodes, keyed ``topic:channel`` (GetNSQDStats' map)."""
    channels = {}
    for topic_name, rows in topics_by_name(topic_rows).items():
        for channel_name, channel_rows in channels_by_name(rows).items():
            channels[f"{topic_name}:{channel_name}"] = aggregate_channel(topic_name, channel_name, channel_rows)
    return channels


def counter_stats(topic_rows: list[dict]) -> dict[str, dict]:
    """``/api/counter``'s stats: each channel's message count on each node, keyed ``topic:channel:node``."""
    stats: dict[str, dict] = {}
    for topic in topic_rows:
        for channel in topic["channels"] or ():
            key = f"{topic['topic_name']}:{channel['channel_name']}:{channel['node']}"
            entry = stats.setdefault(key, {"node": channel["node"], "topic_name": topic["topic_name"],
                                           "channel_name": channel["channel_name"], "message_count": 0})
            entry["message_count"] += channel["message_count"]
    return stats


def node_totals(topic_rows: list[dict]) -> tuple[int, int]:
    """(messages, clients) on one node: what ``/api/nodes/:node`` reports."""
    messages = sum(topic["message_count"] for topic in topic_rows)
    clients = sum(len(channel["clients"] or ()) for topic in topic_rows for channel in topic["channels"] or ())
    return messages, clients


def messages_held(topic_rows: list[dict]) -> int:
    """What one node still holds, as a draining nsqd counts it (nsqd/drain.py): each topic's own
    backlog, each channel's queue, in flight and deferred."""
    return sum(topic["depth"] + sum(channel["depth"] + channel["in_flight_count"] + channel["deferred_count"]
                                    for channel in topic["channels"] or ()) for topic in topic_rows)


def topic_summary(name: str, rows: list[dict]) -> dict:
    """A line of the topics page: the topic's backlog (topic + channels), in flight, messages, channels."""
    channels = channels_by_name(rows)
    channel_rows = [channel for group in channels.values() for channel in group]
    return {
        "topic_name": name,
        "nodes": len(rows),
        "depth": sum(row["depth"] for row in rows) + sum(c["depth"] for c in channel_rows),
        "topic_depth": sum(row["depth"] for row in rows),
        "in_flight_count": sum(c["in_flight_count"] for c in channel_rows),
        "message_count": sum(row["message_count"] for row in rows),
        "message_bytes": sum(row["message_bytes"] for row in rows),
        "channel_count": len(channels),
        "client_count": sum(c["client_count"] for c in channel_rows),
        "paused": any(row["paused"] for row in rows),
        "paused_channels": sorted({c["channel_name"] for c in channel_rows if c["paused"]}),
    }
