"""The nsqd nodes of a cluster as nsqadmin lists them (internal/clusterinfo/types.go: Producer).

Pure functions over the JSON that nsqlookupd's ``/nodes`` and ``/lookup`` and nsqd's
``/info`` and ``/stats`` return: no network here. A producer is a dict with NSQ's keys,
in NSQ's order: ``remote_addresses, remote_address, hostname, broadcast_address,
tcp_port, http_port, version, topics [{topic, tombstoned}], out_of_date``.

A node is named by its HTTP address, ``<broadcast_address>:<http_port>`` (Go's
net.JoinHostPort, so IPv6 hosts are bracketed); that is the ``node`` of every stats row.
"""

import re

_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def http_address(producer: dict) -> str:
    return join_host_port(producer["broadcast_address"], producer["http_port"])


def tcp_address(producer: dict) -> str:
    return join_host_port(producer["broadcast_address"], producer["tcp_port"])


def version_key(version: str) -> tuple:
    """A semantic version, comparable; anything unparsable counts as 0.0.0 (as blang/semver fails)."""
    match = _SEMVER.fullmatch(version or "")
    if not match:
        return (0, 0, 0, 1, ())
    major, minor, patch, pre = match.groups()
    # A pre-release sorts before its release: (..., 0, parts) < (..., 1, ()).
    pre_key = tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in pre.split(".")) if pre else ()
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre_key)


def _text(raw: dict, key: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"json: cannot unmarshal {type(value).__name__} into field {key} of type string")
    return value


def _port(raw: dict, key: str) -> int:
    value = raw.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise ValueError(f"json: cannot unmarshal {type(value).__name__} into field {key} of type int")
    return value


def producer(raw: dict, topics: list[dict] | None = None) -> dict:
    """A producer from a lookupd peer record (``/nodes``, ``/lookup``) or nsqd's ``/info``."""
    if not isinstance(raw, dict):
        raise ValueError("json: cannot unmarshal producer: not an object")
    if topics is None:
        names = raw.get("topics") or []
        flags = raw.get("tombstones") or []
        topics = [{"topic": name, "tombstoned": bool(flags[i]) if i < len(flags) else False}
                  for i, name in enumerate(names)]
    return {
        "remote_addresses": None,
        "remote_address": _text(raw, "remote_address"),
        "hostname": _text(raw, "hostname"),
        "broadcast_address": _text(raw, "broadcast_address"),
        "tcp_port": _port(raw, "tcp_port"),
        "http_port": _port(raw, "http_port"),
        "version": _text(raw, "version"),
        "topics": topics,
        "out_of_date": False,
    }


def mark_out_of_date(producers: list[dict]) -> None:
    """Every producer older than the newest one seen is out of date."""
    if not producers:
        return
    newest = max(version_key(p["version"]) for p in producers)
    for p in producers:
        p["out_of_date"] = version_key(p["version"]) < newest


def by_hostname(producers: list[dict]) -> list[dict]:
    """NSQ's order; producers of one hostname by address, where Go's order is random."""
    return sorted(producers, key=lambda p: (p["hostname"], p["broadcast_address"], p["http_port"]))


def merge_lookupd_nodes(answers: list[tuple[str, list[dict]]]) -> list[dict]:
    """One producer per nsqd (by TCP address) from every lookupd's ``/nodes``, each with the
    ``<lookupd>/<remote address>`` it was seen at, topics sorted, sorted by hostname."""
    merged: dict[str, dict] = {}
    for lookupd, raw_producers in answers:
        for raw in raw_producers:
            found = producer(raw)
            key = tcp_address(found)
            kept = merged.get(key)
            if kept is None:
                found["topics"].sort(key=lambda t: t["topic"])
                found["remote_addresses"] = []
                merged[key] = kept = found
            kept["remote_addresses"].append(f"{lookupd}/{found['remote_address'] or 'N/A'}")
    producers = list(merged.values())
    mark_out_of_date(producers)
    return by_hostname(producers)


def union_by_http_address(lists: list[list[dict]]) -> list[dict]:
    """Producers of a topic from several lookupds' ``/lookup``, each nsqd once."""
    seen: dict[str, dict] = {}
    for producers in lists:
        for p in producers:
            seen.setdefault(http_address(p), p)
    return list(seen.values())


def nsqd_producer(info: dict, address: str, topic_names: list[str]) -> dict:
    """A producer from an nsqd's ``/info`` (asked at ``address``) and the topics its ``/stats`` lists.

    An nsqd too old to report its broadcast address or hostname is named by the address
    it was asked at, as NSQ's nsqadmin does.
    """
    found = producer(info, topics=[{"topic": name, "tombstoned": False} for name in topic_names])
    host, _, port = address.rpartition(":")
    if not found["broadcast_address"]:
        found["broadcast_address"] = host.strip("[]")
        found["http_port"] = int(port) if port.isdigit() else 0
    if not found["hostname"]:
        found["hostname"] = host.strip("[]")
    return found


def find(producers: list[dict], node: str) -> dict | None:
    """The producer whose HTTP address is ``node`` (clusterinfo.Producers.Search)."""
    for p in producers:
        if http_address(p) == node:
            return p
    return None


def active_topics(producers: list[dict]) -> set[str]:
    """Topics that some producer serves without a tombstone: what ``/lookup`` would find producers for."""
    return {t["topic"] for p in producers for t in p["topics"] if not t["tombstoned"]}
