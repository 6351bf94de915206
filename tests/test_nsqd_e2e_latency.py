"""End-to-end processing latency (NSQ v1.3's internal/quantile, nsqd/stats.go): the flags, recording on
FIN as now - message timestamp, and /stats e2e_processing_latency in JSON and text."""

import json
import re
import struct

import httpx
import pytest
import trio

from common.goflags import FlagError
from nsqd.options import load_options
from nsqd.stats import nanoseconds_to_human

from .helpers import RawClient
from .waiting import await_until

PERCENTILES = [1.0, 0.99, 0.5]


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


async def publish(port: int, topic: str, count: int) -> None:
    client = await RawClient.connect(port)
    await client.send(mpub(topic, [b"m%d" % i for i in range(count)]))
    assert await client.read_response() == b"OK"
    await client.close()


async def consume(port: int, topic: str, channel: str, count: int, hold: float) -> None:
    """Receive ``count`` messages, keep them ``hold`` seconds, then FIN them all."""
    client = await RawClient.connect(port)
    await client.sub(topic, channel, rdy=count)
    messages = [await client.read_message() for _ in range(count)]
    await trio.sleep(hold)  # deliberate: the processing time the latency must show
    await client.send(b"".join(b"FIN " + msg.id + b"\n" for msg in messages))
    await client.send(b"NOP\n")
    await client.close()


async def stats(nsqd) -> dict:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json&include_clients=false")
    return response.json()


async def wait_for_count(nsqd, count: int) -> dict:
    """/stats once the first channel has recorded ``count`` FINs."""
    async def counted() -> dict | None:
        document = await stats(nsqd)
        return document if document["topics"][0]["channels"][0]["e2e_processing_latency"]["count"] >= count else None

    return await await_until(counted, what=f"{count} FINs counted")


def values(latency: dict) -> dict[float, float]:
    return {item["quantile"]: item["value"] / 1e9 for item in latency["percentiles"]}


# -- flags ---------------------------------------------------------------------------------------


def test_percentile_flag_takes_repeats_and_commas_sorted_as_nsq_sorts_them():
    opts = load_options(["--e2e-processing-latency-percentile=0.5,0.99", "--e2e-processing-latency-percentile", "1.0"])
    assert opts.e2e_processing_latency_percentile == [1.0, 0.99, 0.5]
    assert load_options([]).e2e_processing_latency_window_time == 600.0
    assert load_options(["--e2e-processing-latency-window-time=1m"]).e2e_processing_latency_window_time == 60.0


def test_config_file_key_is_nsqs(tmp_path):
    path = tmp_path / "nsqd.cfg"
    path.write_text('e2e_processing_latency_percentiles = [0.5, 0.99]\ne2e_processing_latency_window_time = "30s"\n')
    opts = load_options([f"--config={path}"])
    assert (opts.e2e_processing_latency_percentile, opts.e2e_processing_latency_window_time) == ([0.5, 0.99], 30.0)


@pytest.mark.parametrize("argv, message", [
    (["--e2e-processing-latency-percentile=0"], "Invalid percentile: 0"),
    (["--e2e-processing-latency-percentile=0.5,1.5"], "Invalid percentile: 1.5"),
    (["--e2e-processing-latency-percentile=-0.1"], "Invalid percentile: -0.1"),
    (["--e2e-processing-latency-percentile=abc"], "Could not parse: abc"),  # NSQ's app.FloatArray's words
    (["--e2e-processing-latency-window-time=0s"], "--e2e-processing-latency-window-time must be greater than 0"),
])
def test_bad_percentiles_and_window_are_startup_errors(argv, message):
    with pytest.raises(FlagError) as info:
        load_options(argv)
    assert str(info.value).startswith(message)


# -- /stats JSON --------------------------------------------------------------------------------


async def test_fin_records_now_minus_publish_time(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=PERCENTILES)
    await publish(nsqd.tcp_port, "t", 20)
    await consume(nsqd.tcp_port, "t", "c", 20, hold=0.3)
    document = await wait_for_count(nsqd, 20)
    [topic] = document["topics"]
    [channel] = topic["channels"]
    latency = channel["e2e_processing_latency"]
    assert latency["count"] == 20
    assert [item["quantile"] for item in latency["percentiles"]] == PERCENTILES  # the configured order
    for value in values(latency).values():
        assert 0.3 <= value < 1.5, latency
    assert topic["e2e_processing_latency"] == latency  # one channel: the topic's merge is that channel


async def test_only_fin_records(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=[0.5])
    await publish(nsqd.tcp_port, "t", 1)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("t", "c", rdy=1)
    msg = await client.read_message()
    await client.send(b"REQ " + msg.id + b" 0\n")
    again = await client.read_message()
    await client.send(b"TOUCH " + again.id + b"\n")
    await client.assert_no_frame(0.1)
    assert (await stats(nsqd))["topics"][0]["channels"][0]["e2e_processing_latency"]["count"] == 0
    await client.send(b"FIN " + again.id + b"\n")
    await wait_for_count(nsqd, 1)


async def test_topic_value_merges_its_channels(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=PERCENTILES)
    async with trio.open_nursery() as nursery:
        for channel in ("fast", "slow"):
            await (await RawClient.connect(nsqd.tcp_port)).sub("t", channel)  # both channels get every message
        await publish(nsqd.tcp_port, "t", 10)
        nursery.start_soon(consume, nsqd.tcp_port, "t", "fast", 10, 0.0)
        nursery.start_soon(consume, nsqd.tcp_port, "t", "slow", 10, 0.5)
    async def both_counted() -> dict | None:
        topic = (await stats(nsqd))["topics"][0]
        return topic if topic["e2e_processing_latency"]["count"] >= 20 else None

    topic = await await_until(both_counted, what="20 FINs counted")
    fast, slow = (values(channel["e2e_processing_latency"]) for channel in topic["channels"])
    merged = values(topic["e2e_processing_latency"])
    assert fast[1.0] < 0.5 <= slow[0.5]
    assert merged[1.0] == slow[1.0]
    assert merged[0.5] == fast[1.0]  # the 10th of 20 samples is the fast channel's slowest


async def test_a_topic_without_channels_has_no_percentiles_and_an_idle_channel_zeros(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=[0.99, 0.5])
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        assert (await http.post("/topic/create?topic=lonely")).status_code == 200
        assert (await http.post("/topic/create?topic=t")).status_code == 200
        assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
        raw = (await http.get("/stats?format=json")).text
    lonely, t = json.loads(raw)["topics"]
    assert lonely["e2e_processing_latency"] == {"count": 0, "percentiles": None}  # NSQ's nil aggregate
    idle = {"count": 0, "percentiles": [{"quantile": 0.99, "value": 0}, {"quantile": 0.5, "value": 0}]}
    assert t["e2e_processing_latency"] == t["channels"][0]["e2e_processing_latency"] == idle


async def test_json_writes_integral_quantiles_as_go_does(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=[1.0])
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        assert (await http.post("/topic/create?topic=t")).status_code == 200
        assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
        raw = (await http.get("/stats?format=json")).text
    assert raw.count('"e2e_processing_latency":{"count":0,"percentiles":[{"quantile":1,"value":0}]}') == 2


async def test_samples_leave_after_the_window(start_nsqd):
    # a sample lives at least half a window, so 2 s leaves a loaded machine 1 s to see all five
    nsqd = await start_nsqd(e2e_processing_latency_percentile=[0.5], e2e_processing_latency_window_time=2.0)
    await publish(nsqd.tcp_port, "t", 5)
    await consume(nsqd.tcp_port, "t", "c", 5, hold=0.0)
    await wait_for_count(nsqd, 5)
    await trio.sleep(2.05)  # deliberate: a sample lives at most a whole window (a lower bound: load only adds)
    assert (await stats(nsqd))["topics"][0]["channels"][0]["e2e_processing_latency"]["count"] == 0


# -- text format -----------------------------------------------------------------------------------


@pytest.mark.parametrize("nanoseconds, text", [
    (0, "0.0ns"), (999, "999.0ns"), (1000, "1000.0ns"), (1001, "1.0us"), (1_250_000, "1.2ms"),
    (1_000_000, "1000.0us"), (1_000_001, "1.0ms"), (2_000_000_001, "2.0s"), (3_660_000_000_000, "3660.0s"),
])
def test_nanoseconds_to_human_is_stringys(nanoseconds, text):
    assert nanoseconds_to_human(nanoseconds) == text


async def test_text_e2e_column_lists_the_values(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=PERCENTILES)
    await publish(nsqd.tcp_port, "t", 3)
    await consume(nsqd.tcp_port, "t", "c", 3, hold=0.2)
    latency = (await wait_for_count(nsqd, 3))["topics"][0]["channels"][0]["e2e_processing_latency"]
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?include_mem=false")).text
    column = ", ".join(nanoseconds_to_human(item["value"]) for item in latency["percentiles"])
    assert re.fullmatch(r"\d+\.\d(ns|us|ms|s)(, \d+\.\d(ns|us|ms|s)){2}", column), column
    lines = text.split("\n")
    topic_line = next(line for line in lines if line.startswith("   [t "))
    channel_line = next(line for line in lines if line.startswith("      [c "))
    assert topic_line.endswith(f"e2e%: {column}") and channel_line.endswith(f"e2e%: {column}")
