"""nsqclient.ProducerPool against real nsqd processes, under asyncio and trio: publishes move to
the next nsqd when one drains (nsqd/drain.py) and when one is gone, and nothing is lost or sent
twice."""

import json
import signal

import anyio
import httpx
import pytest

from nsqclient import ProducerPool, ProtocolError

from .client_helpers import backend, run, start_nsqd, topic_stats, unique  # noqa: F401 (fixtures)
from .waiting import wait_until


def put_drain(nsqd) -> None:
    answer = httpx.put(f"http://127.0.0.1:{nsqd.http_port}/config/drain", content=b"true")
    assert answer.status_code == 200, answer.text


def test_publishes_move_to_the_next_nsqd_when_one_drains_then_exits(backend, tmp_path_factory):
    first, second = start_nsqd(tmp_path_factory), start_nsqd(tmp_path_factory)
    topic = unique()
    took: list[str] = []
    try:
        httpx.post(f"http://127.0.0.1:{first.http_port}/topic/create?topic=held")
        httpx.post(f"http://127.0.0.1:{first.http_port}/pub?topic=held", content=b"keeps it draining")

        async def body():
            async with ProducerPool([first.tcp_address, second.tcp_address], retry_after=0.2) as pool:
                took.append(await pool.publish(topic, b"before"))
                put_drain(first)
                took.append(await pool.multi_publish(topic, [b"during 1", b"during 2"]))
                took.append(await pool.deferred_publish(topic, 0.1, b"during 3"))
                assert pool.usable == [second.tcp_address]
                for name in ("held", topic):  # no channel would ever take them: deleted, nothing is left
                    httpx.post(f"http://127.0.0.1:{first.http_port}/topic/delete?topic={name}")
                await anyio.to_thread.run_sync(first.proc.wait, 30)
                await anyio.sleep(0.3)  # deliberate: past retry_after, so the pool tries the gone nsqd again
                took.append(await pool.publish(topic, b"after"))

        run(backend, body, timeout=60)
        assert took == [first.tcp_address] + [second.tcp_address] * 3
        assert first.proc.returncode == 0
        assert topic_stats(second, topic)["message_count"] == 4
    finally:
        first.stop()
        second.stop()


def test_other_errors_are_not_moved(backend, tmp_path_factory):
    nsqd = start_nsqd(tmp_path_factory)
    other = start_nsqd(tmp_path_factory)
    try:
        async def body():
            async with ProducerPool([nsqd.tcp_address, other.tcp_address]) as pool:
                with pytest.raises(ProtocolError) as refused:
                    await pool.publish(unique(), b"")
                assert refused.value.code == "E_BAD_MESSAGE"
                assert pool.usable == [nsqd.tcp_address, other.tcp_address]

        run(backend, body)
        stats = json.loads(httpx.get(f"http://127.0.0.1:{other.http_port}/stats?format=json").text)
        assert not stats["topics"]
    finally:
        nsqd.stop()
        other.stop()


def test_every_nsqd_draining_raises_the_refusal(backend, tmp_path_factory):
    nsqd = start_nsqd(tmp_path_factory)
    try:
        httpx.post(f"http://127.0.0.1:{nsqd.http_port}/pub?topic=held", content=b"keeps it draining")
        put_drain(nsqd)
        wait_until(lambda: "draining" in httpx.get(f"http://127.0.0.1:{nsqd.http_port}/info").json(), what="draining")

        async def body():
            async with ProducerPool([nsqd.tcp_address]) as pool:
                for _ in range(2):  # left out, then tried again as the only one
                    with pytest.raises(ProtocolError) as refused:
                        await pool.publish(unique(), b"x")
                    assert str(refused.value) == "E_PUB_FAILED PUB failed draining"

        run(backend, body)
    finally:
        nsqd.stop(signal.SIGINT)
