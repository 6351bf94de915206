"""How long consumers take (beyond NSQ: --processing-time-percentile, nsqd/processing_time.py): per
channel, delivery-to-FIN percentiles with the window's REQ and timeout counts, in /stats (an extra key),
/metrics and not in the text /stats; off by default. Against a real nsqd process shared by the module
(each test its own topic), and NSQ v1.3's nsqadmin reading that /stats."""

import struct

import httpx
import pytest
import trio

from common.goflags import FlagError
from nsqd.options import load_options

from .go_nsq import GoAdminProcess, requires_go
from .helpers import NsqdProcess, RawClient
from .waiting import await_until, wait_until


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    proc = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", "--processing-time-percentile=1.0,0.5",
                       "--e2e-processing-latency-percentile=0.5")
    yield proc
    assert proc.stop() == 0


def mpub(topic: str, count: int) -> bytes:
    bodies = [b"m%d" % i for i in range(count)]
    payload = struct.pack(">i", count) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


async def publish(port: int, topic: str, count: int) -> None:
    client = await RawClient.connect(port)
    await client.send(mpub(topic, count))
    assert await client.read_response() == b"OK"
    await client.close()


def channel_stats(nsqd, topic: str) -> dict:
    answer = httpx.get(f"http://127.0.0.1:{nsqd.http_port}/stats", params={"format": "json", "topic": topic})
    return answer.json()["topics"][0]["channels"][0]


async def counted(nsqd, topic: str, key: str, count: int) -> dict:
    def check():
        stats = channel_stats(nsqd, topic)
        return stats if stats["processing_time"][key] >= count else None

    return await await_until(check, what=f"{count} {key} in processing_time")


def seconds(block: dict) -> dict[float, float]:
    return {item["quantile"]: item["value"] / 1e9 for item in block["percentiles"]}


# -- flags ---------------------------------------------------------------------------------------


def test_off_by_default_and_set_by_flag_or_config_key(tmp_path):
    assert load_options([]).processing_time_percentile == []
    assert load_options(["--processing-time-percentile=0.5,0.99"]).processing_time_percentile == [0.99, 0.5]
    path = tmp_path / "nsqd.cfg"
    path.write_text("processing_time_percentiles = [0.5, 0.9]\n")
    assert load_options([f"--config={path}"]).processing_time_percentile == [0.5, 0.9]


@pytest.mark.parametrize("argv, message", [
    (["--processing-time-percentile=0"], "Invalid percentile: 0"),
    (["--processing-time-percentile=0.5,1.5"], "Invalid percentile: 1.5"),
    (["--processing-time-percentile=abc"], "Could not parse: abc"),
])
def test_bad_percentiles_are_startup_errors(argv, message):
    with pytest.raises(FlagError) as info:
        load_options(argv)
    assert str(info.value).startswith(message)


async def test_without_the_flag_stats_has_no_extra_key(start_nsqd):
    nsqd = await start_nsqd()
    nsqd.get_topic("t").get_channel("c")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        channel = (await http.get("/stats?format=json")).json()["topics"][0]["channels"][0]
        metrics = (await http.get("/metrics")).text
    assert "processing_time" not in channel and "processing_time" not in metrics


# -- what it measures ----------------------------------------------------------------------------


async def test_fin_records_the_time_since_delivery_not_since_publish(nsqd):
    await publish(nsqd.tcp_port, "waited", 10)
    await trio.sleep(1.0)  # deliberate: the messages wait queued, which e2e latency counts and this must not
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("waited", "c", rdy=10)
    messages = [await client.read_message() for _ in range(10)]
    await client.send(b"".join(b"FIN " + msg.id + b"\n" for msg in messages[:5]))  # FIN at once
    await trio.sleep(0.4)  # deliberate: the consumer's processing time of the other five
    await client.send(b"".join(b"FIN " + msg.id + b"\n" for msg in messages[5:]))
    stats = await counted(nsqd, "waited", "count", 10)
    await client.close()
    processing, e2e = seconds(stats["processing_time"]), seconds(stats["e2e_processing_latency"])
    assert processing[0.5] < 0.4 <= processing[1.0] < e2e[0.5], (processing, e2e)
    assert 1.0 <= e2e[0.5]
    assert stats["processing_time"]["requeue_count"] == stats["processing_time"]["timeout_count"] == 0
    assert [item["quantile"] for item in stats["processing_time"]["percentiles"]] == [1, 0.5]


async def test_req_and_timeouts_are_counted_beside_and_not_timed(nsqd):
    await publish(nsqd.tcp_port, "slow", 2)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.identify(msg_timeout=1000)
    await client.sub("slow", "c", rdy=2)
    first, second = await client.read_message(), await client.read_message()
    await client.send(b"REQ " + first.id + b" 0\n")
    requeued = await client.read_message()
    assert requeued.id == first.id
    await client.send(b"FIN " + first.id + b"\n")
    timed_out = await client.read_message(timeout=10)  # the other one, back after its 1 s timeout
    assert timed_out.id == second.id
    stats = await counted(nsqd, "slow", "timeout_count", 1)
    assert (stats["requeue_count"], stats["timeout_count"]) == (1, 1)  # NSQ's own counters agree
    assert stats["processing_time"]["count"] == 1 and stats["processing_time"]["requeue_count"] == 1
    await client.send(b"FIN " + second.id + b"\n")
    stats = await counted(nsqd, "slow", "count", 2)
    assert seconds(stats["processing_time"])[0.5] < 1.0  # each FIN timed from its own delivery
    await client.close()


async def test_samples_leave_with_the_e2e_window(start_nsqd):
    nsqd = await start_nsqd(processing_time_percentile=[0.5], e2e_processing_latency_window_time=2.0)
    channel = nsqd.get_topic("t").get_channel("c")
    nsqd.get_topic("t").publish([b"x"], 0)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("t", "c", rdy=1)
    msg = await client.read_message()
    await client.send(b"FIN " + msg.id + b"\nREQ 0000000000000000 0\n")  # the REQ fails: nothing counted
    await client.read_error()
    await await_until(lambda: channel.processing_time.stats()["count"] == 1, what="the FIN counted")
    await trio.sleep(2.05)  # deliberate: a sample lives at most a whole window
    assert channel.processing_time.stats() == {"count": 0, "percentiles": [{"quantile": 0.5, "value": 0}],
                                               "requeue_count": 0, "timeout_count": 0}


# -- where it shows --------------------------------------------------------------------------------


async def test_metrics_and_text_stats(nsqd):
    await publish(nsqd.tcp_port, "shown", 3)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("shown", "c", rdy=3)
    messages = [await client.read_message() for _ in range(3)]
    await client.send(b"REQ " + messages[0].id + b" 0\n" + b"".join(b"FIN " + m.id + b"\n" for m in messages[1:]))
    stats = await counted(nsqd, "shown", "count", 2)
    await client.close()
    metrics = httpx.get(f"http://127.0.0.1:{nsqd.http_port}/metrics").text
    labels = 'topic="shown",channel="c"'
    for quantile, value in seconds(stats["processing_time"]).items():
        assert f'nsq_channel_processing_time_seconds{{{labels},quantile="{quantile:g}"}} {value}\n' in metrics
    assert f"nsq_channel_processing_time_finishes{{{labels}}} 2\n" in metrics
    assert f"nsq_channel_processing_time_requeues{{{labels}}} 1\n" in metrics
    assert f"nsq_channel_processing_time_timeouts{{{labels}}} 0\n" in metrics
    assert "# TYPE nsq_channel_processing_time_seconds gauge\n" in metrics
    text = httpx.get(f"http://127.0.0.1:{nsqd.http_port}/stats?topic=shown").text
    assert "processing" not in text  # NSQ's text layout is left as it is


@requires_go
def test_nsqs_nsqadmin_reads_stats_with_the_extra_key(nsqd):
    for path in ("/topic/create", "/channel/create"):
        httpx.post(f"http://127.0.0.1:{nsqd.http_port}{path}", params={"topic": "for_go", "channel": "c"})
    assert "processing_time" in channel_stats(nsqd, "for_go")
    admin = GoAdminProcess(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}")
    try:
        answer = wait_until(lambda: httpx.get(f"{admin.url}/api/topics/for_go/c", timeout=5),
                            what="NSQ's nsqadmin answers")
        assert answer.status_code == 200, answer.text
        channel = answer.json()
        assert (channel["channel_name"], channel["depth"], channel.get("message", "")) == ("c", 0, "")
    finally:
        admin.stop()
