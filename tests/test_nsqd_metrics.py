"""GET /metrics (beyond NSQ): the Prometheus text exposition of nsqd's stats, read back
with prometheus_client's own parser."""

import struct

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .helpers import RawClient

EXPECTED_TYPES = {
    "nsq_info": "gauge", "nsq_healthy": "gauge", "nsq_clients": "gauge",
    "nsq_topic_depth": "gauge", "nsq_topic_backend_depth": "gauge", "nsq_topic_messages": "counter",
    "nsq_topic_message_bytes": "counter", "nsq_topic_paused": "gauge",
    "nsq_topic_e2e_processing_latency_seconds": "gauge",
    "nsq_channel_depth": "gauge", "nsq_channel_backend_depth": "gauge", "nsq_channel_in_flight_messages": "gauge",
    "nsq_channel_deferred_messages": "gauge", "nsq_channel_messages": "counter", "nsq_channel_requeues": "counter",
    "nsq_channel_timeouts": "counter", "nsq_channel_clients": "gauge", "nsq_channel_paused": "gauge",
    "nsq_channel_e2e_processing_latency_seconds": "gauge",
    "process_resident_memory_bytes": "gauge", "process_start_time_seconds": "gauge", "nsq_heap_objects": "gauge",
    "nsq_gc_runs": "counter",
}


async def scrape(nsqd) -> tuple[httpx.Response, dict]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{nsqd.http_port}/metrics")
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    return response, families


def samples(families: dict, name: str) -> dict[tuple, float]:
    """{label values in label order: value} of one family's samples."""
    return {tuple(sample.labels.values()): sample.value for sample in families[name].samples}


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_an_empty_nsqd(nsqd):
    response, families = await scrape(nsqd)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert {name: family.type for name, family in families.items()} == EXPECTED_TYPES
    assert all(family.documentation for family in families.values())
    assert samples(families, "nsq_info") == {("1.3.0",): 1}
    assert samples(families, "nsq_healthy") == {(): 1}
    assert samples(families, "nsq_topic_depth") == {}
    assert samples(families, "process_resident_memory_bytes")[()] > 1_000_000
    assert samples(families, "process_start_time_seconds") == {(): nsqd.start_time}


async def test_topics_channels_and_latency(start_nsqd):
    nsqd = await start_nsqd(e2e_processing_latency_percentile=[0.99, 0.5])
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("orders", "billing", rdy=2)
    producer = await RawClient.connect(nsqd.tcp_port)
    for body in (b"one", b"two", b"three"):
        await producer.send(b"PUB orders\n" + sized(body))
        assert await producer.read_response() == b"OK"
    await producer.send(b"DPUB orders 60000\n" + sized(b"later"))
    assert await producer.read_response() == b"OK"
    first, second = await consumer.read_message(), await consumer.read_message()
    await consumer.send(b"FIN " + first.id + b"\n" + b"REQ " + second.id + b" 0\n")
    assert {(await consumer.read_message()).body for _ in range(2)} == {b"two", b"three"}  # both in flight
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        assert (await http.post("/channel/create?topic=orders&channel=audit")).status_code == 200

    _, families = await scrape(nsqd)
    billing, audit = ("orders", "billing"), ("orders", "audit")
    assert samples(families, "nsq_topic_messages") == {("orders",): 4}
    assert samples(families, "nsq_topic_message_bytes") == {("orders",): 3 + 3 + 5 + 5}
    assert samples(families, "nsq_topic_depth") == {("orders",): 0}
    assert samples(families, "nsq_topic_paused") == {("orders",): 0}
    assert samples(families, "nsq_channel_messages") == {billing: 4, audit: 0}
    assert samples(families, "nsq_channel_depth") == {billing: 0, audit: 0}
    assert samples(families, "nsq_channel_in_flight_messages") == {billing: 2, audit: 0}
    assert samples(families, "nsq_channel_deferred_messages") == {billing: 1, audit: 0}
    assert samples(families, "nsq_channel_requeues") == {billing: 1, audit: 0}
    assert samples(families, "nsq_channel_timeouts") == {billing: 0, audit: 0}
    assert samples(families, "nsq_channel_clients") == {billing: 1, audit: 0}
    assert samples(families, "nsq_clients") == {(): 2}

    latency = samples(families, "nsq_channel_e2e_processing_latency_seconds")
    assert set(latency) == {("orders", "billing", "0.99"), ("orders", "billing", "0.5"),
                            ("orders", "audit", "0.99"), ("orders", "audit", "0.5")}
    assert 0 < latency[("orders", "billing", "0.99")] < 5  # seconds, not nanoseconds
    assert latency[("orders", "audit", "0.5")] == 0
    topic_latency = samples(families, "nsq_topic_e2e_processing_latency_seconds")
    assert topic_latency == {("orders", "0.99"): latency[("orders", "billing", "0.99")],
                             ("orders", "0.5"): latency[("orders", "billing", "0.5")]}


async def test_no_latency_samples_without_configured_percentiles(nsqd):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c")
    _, families = await scrape(nsqd)
    assert samples(families, "nsq_channel_depth") == {("t", "c"): 0}
    assert samples(families, "nsq_channel_e2e_processing_latency_seconds") == {}
    assert samples(families, "nsq_topic_e2e_processing_latency_seconds") == {}


async def test_only_get(nsqd):
    async with httpx.AsyncClient() as http:
        response = await http.post(f"http://127.0.0.1:{nsqd.http_port}/metrics")
    assert (response.status_code, response.json()) == (405, {"message": "METHOD_NOT_ALLOWED"})
