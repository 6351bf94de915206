"""Pushing stats to statsd over UDP (nsqd/statsd.go, internal/statsd, internal/writers).

Every --statsd-interval, nsqd takes its /stats numbers and writes one statsd line per
stat, ``<prefix><stat>:<value>|c`` or ``|g``, with NSQ's names: counters carry the change
since the previous push, gauges the current value. The lines are packed into packets of
at most --statsd-udp-packet-size bytes without splitting a line (a line longer than a
packet goes alone, as with NSQ's bufio writer), and sent from a new UDP socket, spread
evenly over the interval less a second so that a large nsqd does not burst. When nsqd
stops during a push, the packets left are sent at once, as NSQ's SpreadWriter does.
"""

import logging
import socket

import trio

from common.goflags import FlagError
from serving.listeners import parse_address

from . import stats

log = logging.getLogger("nsqd")

DIAL_TIMEOUT = 1.0
SPREAD_MARGIN = 1.0  # the sends end this long before the next push is due
MEM_GAUGES = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes", "gc_pause_usec_100",
              "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes")
TOPIC_COUNTERS = ("message_count", "message_bytes")
TOPIC_GAUGES = ("depth", "backend_depth")
CHANNEL_STATS = (("message_count", "c"), ("depth", "g"), ("backend_depth", "g"), ("in_flight_count", "g"),
                 ("deferred_count", "g"), ("requeue_count", "c"), ("timeout_count", "c"), ("client_count", "g"))


def host_prefix(prefix: str, broadcast_address: str, http_port: int) -> str:
    """--statsd-prefix with ``%s`` replaced by the host key, ending in a dot (nsqd.New)."""
    if not prefix:
        return ""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address  # net.JoinHostPort
    key = f"{host}:{http_port}".replace(".", "_").replace(":", "_")
    prefix = prefix.replace("%s", key)
    return prefix if prefix.endswith(".") else prefix + "."


class Report:
    """Turns successive /stats snapshots into statsd lines, remembering the last counters."""

    def __init__(self, prefix: str, exclude_ephemeral: bool):
        self.prefix = prefix
        self.exclude_ephemeral = exclude_ephemeral
        self._last_topics: dict[str, dict] = {}
        self._last_gc_runs = 0

    def lines(self, topics: list[dict], memory: dict | None) -> list[bytes]:
        """The lines of one push: every topic and channel, then memory if given."""
        out: list[bytes] = []
        for topic in topics:
            if not (self.exclude_ephemeral and topic["topic_name"].endswith("#ephemeral")):
                self._topic_lines(out, topic, self._last_topics.get(topic["topic_name"], {}))
        self._last_topics = {topic["topic_name"]: topic for topic in topics}
        if memory is not None:
            out += [self._line(f"mem.{key}", memory[key], "g") for key in MEM_GAUGES]
            out.append(self._line("mem.gc_runs", memory["gc_total_runs"] - self._last_gc_runs, "c"))
            self._last_gc_runs = memory["gc_total_runs"]
        return out

    def _topic_lines(self, out: list[bytes], topic: dict, last: dict) -> None:
        name = f"topic.{topic['topic_name']}"
        out += [self._line(f"{name}.{key}", topic[key] - last.get(key, 0), "c") for key in TOPIC_COUNTERS]
        out += [self._line(f"{name}.{key}", topic[key], "g") for key in TOPIC_GAUGES]
        out += self._latency_lines(name, topic["e2e_processing_latency"])
        last_channels = {channel["channel_name"]: channel for channel in last.get("channels", [])}
        for channel in topic["channels"]:
            if self.exclude_ephemeral and channel["channel_name"].endswith("#ephemeral"):
                continue
            channel_name = f"{name}.channel.{channel['channel_name']}"
            last_channel = last_channels.get(channel["channel_name"], {})
            for key, kind in CHANNEL_STATS:
                value = channel[key] - last_channel.get(key, 0) if kind == "c" else channel[key]
                out.append(self._line(f"{channel_name}.{'clients' if key == 'client_count' else key}", value, kind))
            out += self._latency_lines(channel_name, channel["e2e_processing_latency"])

    def _latency_lines(self, name: str, latency: dict) -> list[bytes]:
        return [self._line(f"{name}.e2e_processing_latency_{item['quantile'] * 100:.0f}", int(item["value"]), "g")
                for item in latency["percentiles"] or []]

    def _line(self, stat: str, value: int, kind: str) -> bytes:
        return f"{self.prefix}{stat}:{value}|{kind}\n".encode()


def packets(lines: list[bytes], size: int) -> list[bytes]:
    """Lines packed in order into packets of at most ``size`` bytes, never splitting one."""
    out: list[bytes] = []
    current = bytearray()
    for line in lines:
        if current and len(current) + len(line) > size:
            out.append(bytes(current))
            current.clear()
        if len(line) > size:
            out.append(line)
        else:
            current += line
    if current:
        out.append(bytes(current))
    return out


async def run(nsqd) -> None:
    """Push to --statsd-address every --statsd-interval, for as long as nsqd runs."""
    opts = nsqd.opts
    report = Report(opts.statsd_prefix, opts.statsd_exclude_ephemeral)  # host_prefix'ed as nsqd started
    interval = opts.statsd_interval
    next_push = trio.current_time() + interval
    while True:
        await trio.sleep_until(next_push)
        next_push = max(next_push + interval, trio.current_time())
        document = stats.stats_document(nsqd, "", "", include_clients=False, include_mem=False)
        memory = stats.memory_stats(nsqd.gc_pauses) if opts.statsd_mem_stats else None
        lines = report.lines(document["topics"], memory)
        await push(opts.statsd_address, packets(lines, opts.statsd_udp_packet_size),
                   max(0.0, interval - SPREAD_MARGIN))


async def push(address: str, to_send: list[bytes], spread: float) -> None:
    """Send ``to_send`` from a new UDP socket, one packet every ``spread / len`` seconds."""
    try:
        sock = await _dial(address)
    except (OSError, FlagError, trio.TooSlowError) as exc:
        log.error("failed to create UDP socket to statsd(%s): %s", address, exc)
        return
    log.info("STATSD: pushing stats to %s", address)
    sent = 0
    with sock:
        try:
            start = trio.current_time()
            for sent, packet in enumerate(to_send, 1):
                _send(sock, packet)
                await trio.sleep_until(start + sent * spread / len(to_send))
        finally:
            for packet in to_send[sent:]:
                _send(sock, packet)


async def _dial(address: str) -> socket.socket:
    parsed = parse_address(address, "--statsd-address")
    if isinstance(parsed, str):
        raise FlagError(f"missing port in address {address}")
    with trio.fail_after(DIAL_TIMEOUT):
        infos = await trio.socket.getaddrinfo(parsed[0] or None, parsed[1], type=socket.SOCK_DGRAM)
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        sock.connect(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def _send(sock: socket.socket, packet: bytes) -> None:
    try:
        sock.send(packet)
    except OSError as exc:  # UDP: a full buffer or an unreachable port loses the packet, as in NSQ
        log.debug("statsd: packet lost: %s", exc)
