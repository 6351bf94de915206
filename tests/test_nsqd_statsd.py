"""statsd (NSQ v1.3's nsqd/statsd.go): the host-keyed prefix, NSQ's metric names and kinds, counters
as deltas, packets bounded by --statsd-udp-packet-size and spread over the interval;
end to end against a real UDP listener."""

import logging
import socket
import struct

import pytest
import trio

from common.goflags import FlagError
from nsqd import statsd
from nsqd.options import load_options

from .helpers import RawClient

HOST = "statsd.test"
MEM_STATS = {"mem.heap_objects", "mem.heap_idle_bytes", "mem.heap_in_use_bytes", "mem.heap_released_bytes",
             "mem.gc_pause_usec_100", "mem.gc_pause_usec_99", "mem.gc_pause_usec_95", "mem.next_gc_bytes",
             "mem.gc_runs"}


class UDPListener:
    """A statsd server stand-in: every datagram, with when it arrived."""

    def __init__(self, sock):
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.packets: list[tuple[float, bytes]] = []

    async def receive(self, count: int, timeout: float = 5.0) -> list[bytes]:
        with trio.fail_after(timeout):
            while len(self.packets) < count:
                data = await self.sock.recv(65536)
                self.packets.append((trio.current_time(), data))
        return [data for _, data in self.packets[:count]]

    async def push(self, timeout: float = 5.0) -> dict[str, tuple[int, str]]:
        """The next push, as {stat: (value, kind)}: read until the mem.gc_runs line ends it."""
        stats: dict[str, tuple[int, str]] = {}
        with trio.fail_after(timeout):
            while "mem.gc_runs" not in stats:
                data = await self.sock.recv(65536)
                self.packets.append((trio.current_time(), data))
                stats.update(parse(data))
        return stats


def parse(packet: bytes) -> dict[str, tuple[int, str]]:
    """``<prefix><stat>:<value>|<kind>`` lines, the prefix taken off."""
    prefix = statsd.host_prefix("nsq.%s", HOST, 4151)
    out = {}
    for line in packet.decode().splitlines():
        assert line.startswith(prefix), line
        stat, _, rest = line[len(prefix):].rpartition(":")
        value, _, kind = rest.partition("|")
        out[stat] = (int(value), kind)
    return out


@pytest.fixture
async def udp():
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    with sock:
        yield UDPListener(sock)


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


async def publish(port: int, topic: str, *bodies: bytes) -> None:
    client = await RawClient.connect(port)
    await client.send(mpub(topic, list(bodies)))
    assert await client.read_response() == b"OK"
    await client.close()


def statsd_options(udp, **overrides) -> dict:
    return {"statsd_address": f"127.0.0.1:{udp.port}", "statsd_interval": 0.3, "broadcast_address": HOST,
            "broadcast_http_port": 4151, **overrides}


# -- pieces -----------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix, address, port, expected", [
    ("nsq.%s", "myhost.example.com", 4151, "nsq.myhost_example_com_4151."),
    ("nsq.%s", "10.0.0.1", 14151, "nsq.10_0_0_1_14151."),
    ("nsq.%s", "::1", 4151, "nsq.[__1]_4151."),  # net.JoinHostPort brackets IPv6
    ("stats.%s.nsqd.", "h", 1, "stats.h_1.nsqd."),
    ("fixed", "h", 1, "fixed."),
    ("", "h", 1, ""),
])
def test_host_prefix(prefix, address, port, expected):
    assert statsd.host_prefix(prefix, address, port) == expected


def test_packets_keep_lines_whole_and_in_order_within_the_size():
    lines = [b"x" * n + b"\n" for n in (10, 200, 250, 40, 507, 3, 100, 100, 100, 100, 100)]
    packets = statsd.packets(lines, 508)
    assert b"".join(packets) == b"".join(lines)
    assert all(len(packet) <= 508 and packet.endswith(b"\n") for packet in packets)
    assert [len(packet) for packet in packets] == [11 + 201 + 251 + 41, 508, 4 + 101 * 4, 101]


def test_a_line_longer_than_a_packet_goes_alone():
    assert statsd.packets([b"a\n", b"b" * 20 + b"\n", b"c\n"], 10) == [b"a\n", b"b" * 20 + b"\n", b"c\n"]


def topic_snapshot(name: str, messages: int, channels: list[dict]) -> dict:
    return {"topic_name": name, "channels": channels, "depth": 1, "backend_depth": 0, "message_count": messages,
            "message_bytes": messages * 10, "paused": False,
            "e2e_processing_latency": {"count": 0, "percentiles": None}}


def channel_snapshot(name: str, messages: int) -> dict:
    return {"channel_name": name, "depth": 2, "backend_depth": 1, "in_flight_count": 3, "deferred_count": 4,
            "message_count": messages, "requeue_count": messages // 2, "timeout_count": 1, "client_count": 5,
            "clients": None, "paused": False,
            "e2e_processing_latency": {"count": 7, "percentiles": [{"quantile": 0.99, "value": 1_500_000},
                                                                   {"quantile": 0.5, "value": 20_000}]}}


def as_stats(lines: list[bytes]) -> dict[str, str]:
    return dict(line.decode().rstrip("\n").split(":", 1) for line in lines)


def test_report_names_kinds_and_deltas():
    report = statsd.Report("p.", exclude_ephemeral=False)
    memory = {"heap_objects": 1, "heap_idle_bytes": 2, "heap_in_use_bytes": 3, "heap_released_bytes": 4,
              "gc_pause_usec_100": 5, "gc_pause_usec_99": 6, "gc_pause_usec_95": 7, "next_gc_bytes": 8,
              "gc_total_runs": 9}
    first = report.lines([topic_snapshot("t", 10, [channel_snapshot("c", 10)])], memory)
    assert as_stats(first) == {
        "p.topic.t.message_count": "10|c", "p.topic.t.message_bytes": "100|c", "p.topic.t.depth": "1|g",
        "p.topic.t.backend_depth": "0|g",
        "p.topic.t.channel.c.message_count": "10|c", "p.topic.t.channel.c.depth": "2|g",
        "p.topic.t.channel.c.backend_depth": "1|g", "p.topic.t.channel.c.in_flight_count": "3|g",
        "p.topic.t.channel.c.deferred_count": "4|g", "p.topic.t.channel.c.requeue_count": "5|c",
        "p.topic.t.channel.c.timeout_count": "1|c", "p.topic.t.channel.c.clients": "5|g",
        "p.topic.t.channel.c.e2e_processing_latency_99": "1500000|g",
        "p.topic.t.channel.c.e2e_processing_latency_50": "20000|g",
        "p.mem.heap_objects": "1|g", "p.mem.heap_idle_bytes": "2|g", "p.mem.heap_in_use_bytes": "3|g",
        "p.mem.heap_released_bytes": "4|g", "p.mem.gc_pause_usec_100": "5|g", "p.mem.gc_pause_usec_99": "6|g",
        "p.mem.gc_pause_usec_95": "7|g", "p.mem.next_gc_bytes": "8|g", "p.mem.gc_runs": "9|c"}
    assert [line.split(b":")[0] for line in first][:5] == [  # NSQ's order: topic counters, gauges, then channels
        b"p.topic.t.message_count", b"p.topic.t.message_bytes", b"p.topic.t.depth", b"p.topic.t.backend_depth",
        b"p.topic.t.channel.c.message_count"]

    second = as_stats(report.lines([topic_snapshot("t", 25, [channel_snapshot("c", 16), channel_snapshot("d", 4)])],
                                   {**memory, "gc_total_runs": 12}))
    assert (second["p.topic.t.message_count"], second["p.topic.t.message_bytes"]) == ("15|c", "150|c")
    assert (second["p.topic.t.channel.c.message_count"], second["p.topic.t.channel.c.requeue_count"]) == ("6|c", "3|c")
    assert second["p.topic.t.channel.c.timeout_count"] == "0|c"
    assert second["p.topic.t.channel.d.message_count"] == "4|c"  # new since the last push: counted from 0
    assert (second["p.topic.t.depth"], second["p.mem.gc_runs"]) == ("1|g", "3|c")


def test_report_without_memory_and_excluding_ephemeral():
    report = statsd.Report("", exclude_ephemeral=True)
    lines = report.lines([topic_snapshot("t", 1, [channel_snapshot("c", 1), channel_snapshot("x#ephemeral", 1)]),
                          topic_snapshot("e#ephemeral", 1, [channel_snapshot("c", 1)])], None)
    names = {line.split(b":")[0].decode() for line in lines}
    assert "topic.t.depth" in names and "topic.t.channel.c.depth" in names
    assert not any("ephemeral" in name or name.startswith("mem.") for name in names)


def test_e2e_stat_names_use_percent_rounded_like_go():
    topic = topic_snapshot("t", 0, [])
    topic["e2e_processing_latency"] = {"count": 1, "percentiles": [
        {"quantile": 1, "value": 5}, {"quantile": 0.999, "value": 4}, {"quantile": 0.95, "value": 3}]}
    lines = statsd.Report("", False).lines([topic], None)
    assert [line for line in lines if b"e2e" in line] == [  # Go's %.0f of quantile * 100
        b"topic.t.e2e_processing_latency_100:5|g\n", b"topic.t.e2e_processing_latency_100:4|g\n",
        b"topic.t.e2e_processing_latency_95:3|g\n"]


@pytest.mark.parametrize("argv, message", [
    (["--statsd-interval=0s"], "--statsd-interval must be greater than 0"),
    (["--statsd-udp-packet-size=0"], "--statsd-udp-packet-size must be greater than 0, got 0"),
])
def test_bad_statsd_flags(argv, message):
    with pytest.raises(FlagError, match=message):
        load_options(argv)


def test_statsd_flags_and_config_keys(tmp_path):
    path = tmp_path / "nsqd.cfg"
    path.write_text('statsd_address = "127.0.0.1:8125"\nstatsd_interval = "10s"\nstatsd_mem_stats = false\n'
                    'statsd_prefix = "x.%s"\nstatsd_udp_packet_size = 1400\nstatsd_exclude_ephemeral = true\n')
    opts = load_options([f"--config={path}", "--statsd-interval=5s"])
    assert (opts.statsd_address, opts.statsd_interval, opts.statsd_mem_stats, opts.statsd_prefix,
            opts.statsd_udp_packet_size, opts.statsd_exclude_ephemeral) == (
        "127.0.0.1:8125", 5.0, False, "x.%s", 1400, True)


# -- sending -------------------------------------------------------------------------------------


async def test_push_spreads_packets_over_the_interval(udp, nursery):
    packets = [b"p%d:1|c\n" % i for i in range(5)]
    nursery.start_soon(udp.receive, 5)
    start = trio.current_time()
    await statsd.push(f"127.0.0.1:{udp.port}", packets, 1.0)
    assert await udp.receive(5) == packets
    offsets = [arrived - start for arrived, _ in udp.packets]
    for index, offset in enumerate(offsets):  # one packet every 200 ms, the first at once
        assert index * 0.2 - 0.01 <= offset <= index * 0.2 + 0.15, offsets


async def test_a_push_cut_short_by_shutdown_sends_the_rest_at_once(udp):
    packets = [b"p%d:1|c\n" % i for i in range(4)]
    with trio.move_on_after(0.1):
        await statsd.push(f"127.0.0.1:{udp.port}", packets, 60.0)
    assert await udp.receive(4, timeout=1.0) == packets


async def test_an_unusable_address_is_logged_and_skipped(caplog):
    with caplog.at_level(logging.ERROR, logger="nsqd"):
        await statsd.push("no-port-here", [b"a:1|c\n"], 0.0)
        await statsd.push("host.invalid:8125", [b"a:1|c\n"], 0.0)
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        "failed to create UDP socket to statsd(no-port-here)", "failed to create UDP socket to statsd(host.invalid"]


# -- nsqd end to end -------------------------------------------------------------------------------


class Pushes:
    """Successive pushes from nsqd, with each counter summed over all of them."""

    def __init__(self, udp: UDPListener):
        self.udp = udp
        self.totals: dict[str, int] = {}

    async def next(self) -> dict[str, tuple[int, str]]:
        push = await self.udp.push()
        for stat, (value, kind) in push.items():
            if kind == "c":
                self.totals[stat] = self.totals.get(stat, 0) + value
        return push

    async def until_total(self, stat: str, total: int) -> dict[str, tuple[int, str]]:
        """The first push after which ``stat`` has added up to ``total``."""
        while True:
            push = await self.next()
            if self.totals.get(stat) == total:
                return push


async def test_nsqd_pushes_nsqs_metrics_with_counters_as_deltas(start_nsqd, udp):
    nsqd = await start_nsqd(**statsd_options(udp, e2e_processing_latency_percentile=[0.99]))
    pushes = Pushes(udp)
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("orders", "billing", rdy=10)
    await publish(nsqd.tcp_port, "orders", b"aa", b"bbb")
    first_msg = await consumer.read_message()
    await consumer.send(b"FIN " + first_msg.id + b"\n")
    await consumer.read_message()  # the second stays in flight

    await pushes.until_total("topic.orders.channel.billing.message_count", 2)
    push = await pushes.next()  # nothing changed since: counters say 0, gauges say how things are
    assert push["topic.orders.message_count"] == (0, "c")
    assert push["topic.orders.channel.billing.message_count"] == (0, "c")
    assert pushes.totals["topic.orders.message_bytes"] == 5
    assert push["topic.orders.depth"] == (0, "g")
    assert push["topic.orders.channel.billing.in_flight_count"] == (1, "g")
    assert push["topic.orders.channel.billing.clients"] == (1, "g")
    assert push["topic.orders.channel.billing.e2e_processing_latency_99"][0] > 0
    assert push["topic.orders.e2e_processing_latency_99"] == push[
        "topic.orders.channel.billing.e2e_processing_latency_99"]  # the topic merges its only channel
    assert MEM_STATS <= set(push) and push["mem.heap_in_use_bytes"][0] > 0

    await publish(nsqd.tcp_port, "orders", b"c")
    push = await pushes.until_total("topic.orders.message_count", 3)
    assert pushes.totals["topic.orders.message_bytes"] == 6
    assert push["topic.orders.message_count"] == (1, "c")
    assert all(len(packet) <= 508 for _, packet in udp.packets)


async def test_many_stats_fill_many_bounded_packets(start_nsqd, udp):
    nsqd = await start_nsqd(**statsd_options(udp, statsd_udp_packet_size=200, statsd_mem_stats=False))
    for index in range(20):
        await publish(nsqd.tcp_port, f"topic-{index:02d}", b"x")
    with trio.fail_after(5):
        while not any(b"topic.topic-19.backend_depth" in data for _, data in udp.packets):
            udp.packets.append((trio.current_time(), await udp.sock.recv(65536)))
    assert len(udp.packets) >= 10
    assert all(len(data) <= 200 and data.endswith(b"\n") for _, data in udp.packets)
    assert not any(b".mem." in data for _, data in udp.packets)
