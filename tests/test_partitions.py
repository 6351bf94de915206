"""Network partitions between the daemons, in network namespaces joined by veth pairs (and, for
a lossy, slow link, by a wire in user space between two tun devices; tests/netns.py), each case
run against this project's daemons and NSQ v1.3.0's side by side, on two networks of their own,
with the timings printed beside each other.

Timeouts are shortened through NSQ's own flags where it has them, so that each case takes
seconds; what the production defaults would give is said at each case. nsqd PINGs nsqlookupd
every 15 s in both (not a flag), which bounds how soon a lost lookupd is noticed and found
again. Where this machine cannot build the network (not root, no netns), every case skips
with one line saying why; where NSQ's binaries are absent, only ours run.
"""

import sys
import time

import httpx
import pytest
import trio

from common.commands import Identify
from common.frames import FRAME_TYPE_ERROR
from common.message import decode_message

from .datadir import pub
from .go_nsq import go_program, missing_reason
from .netns import Network, connect_from, round_trips, skip_reason, tun_missing, wait_listening

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

KINDS = ("ours", "NSQ v1.3.0") if missing_reason() is None else ("ours",)


def command(kind: str, daemon: str) -> list[str]:
    return [sys.executable, "-m", daemon] if kind == "ours" else [go_program(daemon)]


async def side_by_side(scenario, tmp_path) -> dict[str, dict]:
    """Run ``scenario(kind, network, folder)`` for ours and NSQ's at once; their timings."""
    results: dict[str, dict] = {}

    async def run(kind: str) -> None:
        folder = tmp_path / kind.replace(" ", "_")
        folder.mkdir()
        with Network() as network:
            results[kind] = await scenario(kind, network, folder)

    async with trio.open_nursery() as nursery:
        for kind in KINDS:
            nursery.start_soon(run, kind)
    return results


def report(case: str, results: dict[str, dict]) -> None:
    for kind, timings in results.items():
        print(f"{case} [{kind}]: " + ", ".join(f"{name} {value:.2f} s" if isinstance(value, float) else
                                               f"{name} {value}" for name, value in timings.items()))


async def until(check, timeout: float, what: str) -> float:
    """Seconds until ``check()`` (sync or async) is true; AssertionError after ``timeout``."""
    started = time.monotonic()
    while True:
        result = check()
        if hasattr(result, "__await__"):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await trio.sleep(0.05)


async def get_json(url: str, **params) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.get(url, params=params)).json()


async def publish(host: str, port: int, topic: str, bodies: list[bytes]) -> None:
    client = await connect_from(None, "", host, port)
    await client.send(b"".join(pub(topic, body) for body in bodies))
    for _ in bodies:
        assert await client.read_response() == b"OK"
    await client.close()


async def subscribe(network, namespace: str, host: str, port: int, topic: str, channel: str, rdy: int,
                    **identify):
    client = await connect_from(network, namespace, host, port)
    if identify:
        await client.identify(**identify)
    await client.sub(topic, channel, rdy=rdy)
    return client


def start_nsqd(kind: str, network: Network, namespace: str, folder, listen: str, http: str, *flags: str) -> None:
    data = folder / f"data-{namespace}"
    data.mkdir()
    network.start(namespace, [*command(kind, "nsqd"), f"--tcp-address={listen}:4150", f"--http-address={http}:4151",
                              f"--data-path={data}", *flags], folder / f"nsqd-{namespace}.log")


async def producers_listed(lookupd_http: str, topic: str) -> list[str]:
    answer = await get_json(f"{lookupd_http}/lookup", topic=topic)
    return [producer["broadcast_address"] for producer in answer.get("producers") or []]


# -- nsqd cut from nsqlookupd ------------------------------------------------------------------

CUT_SECONDS = 8  # the 30 s gives the same outcome: both nsqd are back within 15 s of the heal


async def lookupd_cut(kind: str, network: Network, folder) -> dict:
    network.namespace("lookupd")
    network.namespace("nsqd")
    to_lookupd, to_nsqd = network.link("", "lookupd"), network.link("", "nsqd")
    between = network.link("nsqd", "lookupd")
    lookupd_address, nsqd_address = between.address("lookupd"), to_nsqd.address("nsqd")
    network.start("lookupd", [*command(kind, "nsqlookupd"), f"--tcp-address={lookupd_address}:4160",
                              f"--http-address={to_lookupd.address('lookupd')}:4161", "--tombstone-lifetime=3s"],
                  folder / "lookupd.log")
    start_nsqd(kind, network, "nsqd", folder, nsqd_address, nsqd_address, f"--lookupd-tcp-address={lookupd_address}:4160",
               f"--broadcast-address={nsqd_address}")
    lookupd_http = f"http://{to_lookupd.address('lookupd')}:4161"
    await wait_listening(to_lookupd.address("lookupd"), 4161)
    await wait_listening(nsqd_address, 4150)
    consumer = await subscribe(network, "", nsqd_address, 4150, "orders", "c", rdy=100)
    await publish(nsqd_address, 4150, "orders", [b"before"])
    await consumer.read_message()
    await until(lambda: producers_listed(lookupd_http, "orders"), 20, "the registration")

    between.cut("lookupd")
    cut_at = time.monotonic()
    await publish(nsqd_address, 4150, "orders", [b"during %d" % n for n in range(20)])
    assert sorted([(await consumer.read_message()).body for _ in range(20)]) == sorted(b"during %d" % n
                                                                                     for n in range(20))
    await publish(nsqd_address, 4150, "born_during_the_cut", [b"x"])
    assert await producers_listed(lookupd_http, "orders") == [nsqd_address]  # lookupd does not know yet
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{lookupd_http}/topic/tombstone", params={"topic": "orders",
                                                                            "node": f"{nsqd_address}:4151"})
        assert response.status_code == 200, response.text
    tombstoned = await producers_listed(lookupd_http, "orders")
    await trio.sleep(max(0.0, CUT_SECONDS - (time.monotonic() - cut_at)))  # deliberate: the cut lasts its time

    between.heal("lookupd")
    back = await until(lambda: producers_listed(lookupd_http, "born_during_the_cut"), 40,
                       "a topic created during the cut to be registered after the heal")
    return {"consumed during the cut": "20/20", "listed while tombstoned": bool(tombstoned),
            "listed again after the tombstone": bool(await producers_listed(lookupd_http, "orders")),
            "new topic registered after the heal": back}


async def test_nsqd_cut_from_nsqlookupd_keeps_serving_and_registers_again_after_the_heal(tmp_path):
    """Consumers keep consuming from the nsqd they know; lookupd keeps listing it (its 5 m
    inactive timeout is far off) and hides it while tombstoned, as NSQ's; after the heal nsqd
    registers what it created meanwhile: ours within its reconnect backoff (1 s doubling to
    15 s), NSQ's at its next 15 s ping."""
    results = await side_by_side(lookupd_cut, tmp_path)
    report("nsqd cut from nsqlookupd for 8 s", results)
    for kind, result in results.items():
        assert result["new topic registered after the heal"] < 20, (kind, result)
        assert not result["listed while tombstoned"], (kind, result)
    assert len({(r["listed while tombstoned"], r["listed again after the tombstone"]) for r in results.values()}) == 1


# -- a consumer cut mid-flight (half-open) ----------------------------------------------------------

async def half_open_consumer(kind: str, network: Network, folder) -> dict:
    network.namespace("nsqd")
    network.namespace("consumer")
    to_nsqd, consumer_link = network.link("", "nsqd"), network.link("consumer", "nsqd")
    nsqd_address = to_nsqd.address("nsqd")
    start_nsqd(kind, network, "nsqd", folder, "0.0.0.0", nsqd_address)
    await wait_listening(nsqd_address, 4150)
    # heartbeats every 1 s (production: 30 s), messages time out after 3 s (production: 60 s)
    lost = await subscribe(network, "consumer", consumer_link.address("nsqd"), 4150, "jobs", "c", rdy=5,
                           heartbeat_interval=1000, msg_timeout=3000)
    bodies = [b"job %d" % n for n in range(5)]
    await publish(nsqd_address, 4150, "jobs", bodies)
    assert sorted([(await lost.read_message()).body for _ in bodies]) == bodies

    consumer_link.cut("consumer")  # no FIN, no RST: nsqd's packets to it vanish
    cut_at = time.monotonic()
    other = await subscribe(network, "", nsqd_address, 4150, "jobs", "c", rdy=10)
    got = []
    while len(got) < len(bodies):
        message = await other.read_message(timeout=30)
        got.append(message.body)
        await other.send(b"FIN " + message.id + b"\n")
    redelivered = time.monotonic() - cut_at

    async def dropped() -> bool:
        channel = (await get_json(f"http://{nsqd_address}:4151/stats", format="json"))["topics"][0]["channels"][0]
        return len(channel["clients"]) == 1 and channel["in_flight_count"] == 0 and channel["depth"] == 0
    await until(dropped, 20, "the half-open connection dropped and nothing in flight")
    assert sorted(got) == bodies
    return {"redelivered to another consumer after": redelivered,
            "half-open connection dropped after": time.monotonic() - cut_at}


async def test_a_half_open_consumer_is_dropped_by_heartbeats_and_its_messages_go_to_another(tmp_path):
    """Nothing lost, nothing stuck in flight. Ours drops the connection after two missed
    heartbeats and queues its messages again at once; NSQ's keeps them in flight until their
    msg_timeout (the README's "Deliberate differences"). With production defaults: ~60 s
    for ours (30 s heartbeats), up to 60 s more for NSQ's."""
    results = await side_by_side(half_open_consumer, tmp_path)
    report("a consumer cut mid-flight (heartbeats 1 s, msg_timeout 3 s)", results)
    for kind, result in results.items():
        assert result["redelivered to another consumer after"] < 15, (kind, result)


# -- a producer cut while publishing ------------------------------------------------------------------

async def producer_cut(kind: str, network: Network, folder) -> dict:
    network.namespace("nsqd")
    network.namespace("producer")
    to_nsqd, producer_link = network.link("", "nsqd"), network.link("producer", "nsqd")
    nsqd_address = to_nsqd.address("nsqd")
    start_nsqd(kind, network, "nsqd", folder, "0.0.0.0", nsqd_address)
    await wait_listening(nsqd_address, 4150)
    await (await subscribe(network, "", nsqd_address, 4150, "events", "c", rdy=0)).close()  # the channel
    client = await connect_from(network, "producer", producer_link.address("nsqd"), 4150)
    acknowledged, unanswered, n = [], [], 0
    started = time.monotonic()
    cut_at = None
    while True:
        body = b"event %d" % n
        n += 1
        if cut_at is None and time.monotonic() - started > 0.5:
            producer_link.cut("nsqd")
            cut_at = time.monotonic()
        await client.send(pub("events", body))
        try:
            with trio.fail_after(2):  # the client's own timeout
                assert await client.read_response() == b"OK"
        except trio.TooSlowError:
            unanswered.append(body)
            break
        acknowledged.append(body)
    gave_up = time.monotonic() - cut_at
    consumer = await subscribe(network, "", nsqd_address, 4150, "events", "c", rdy=1000)
    received = set()
    while not set(acknowledged) <= received:
        message = await consumer.read_message(timeout=10)
        received.add(message.body)
        await consumer.send(b"FIN " + message.id + b"\n")
    assert received <= set(acknowledged) | set(unanswered)
    return {"acknowledged and delivered": f"{len(acknowledged)}/{len(acknowledged)}",
            "the unanswered publish stored": bool(received & set(unanswered)), "client timed out after": gave_up}


async def test_a_producer_cut_while_publishing_loses_no_acknowledged_message(tmp_path):
    """Every publish either got its OK (and is delivered) or the client's timeout; nothing
    acknowledged is lost."""
    results = await side_by_side(producer_cut, tmp_path)
    report("a producer cut while publishing (client timeout 2 s)", results)


# -- nsqadmin cut from one nsqd -----------------------------------------------------------------------

async def admin_cut(kind: str, network: Network, folder) -> dict:
    for namespace in ("admin", "nsqd1", "nsqd2"):
        network.namespace(namespace)
    to_admin, to_nsqd1 = network.link("", "admin"), network.link("", "nsqd1")
    links = {n: network.link("admin", n) for n in ("nsqd1", "nsqd2")}
    for n in ("nsqd1", "nsqd2"):
        start_nsqd(kind, network, n, folder, "0.0.0.0", "0.0.0.0")
    admin_address = to_admin.address("admin")
    # production: --http-client-connect-timeout=2s, --http-client-request-timeout=5s
    network.start("admin", [*command(kind, "nsqadmin"), f"--http-address={admin_address}:4171",
                            "--http-client-connect-timeout=1s", "--http-client-request-timeout=2s",
                            *(f"--nsqd-http-address={links[n].address(n)}:4151" for n in links)], folder / "admin.log")
    await wait_listening(to_nsqd1.address("nsqd1"), 4150)
    await wait_listening(admin_address, 4171)
    await publish(to_nsqd1.address("nsqd1"), 4150, "orders", [b"x"])
    url = f"http://{admin_address}:4171"
    await until(lambda: _topics(url), 20, "nsqadmin to list the topic")

    links["nsqd2"].cut("nsqd2")
    failed = links["nsqd2"].address("nsqd2")
    timings = {}
    async with httpx.AsyncClient(timeout=30) as http:
        for path in ("/api/topics", "/api/nodes", "/"):
            started = time.monotonic()
            response = await http.get(url + path)
            timings[f"GET {path}"] = time.monotonic() - started
            assert response.status_code == 200, (kind, path, response.status_code, response.text[:300])
            if path.startswith("/api"):
                assert failed in response.json()["message"], (kind, path, response.text[:300])
            elif kind == "ours":
                assert failed in response.text, "the page names the node that did not answer"
    return timings


async def _topics(url: str) -> list:
    return (await get_json(url + "/api/topics")).get("topics") or []


async def test_nsqadmin_cut_from_one_node_still_answers_and_names_it(tmp_path):
    """The API and pages answer within the request timeout (2 s here) with what the other node
    said and the failed node named (NSQ's page is a script that asks the API)."""
    results = await side_by_side(admin_cut, tmp_path)
    report("nsqadmin cut from one of two nsqd (connect timeout 1 s, request timeout 2 s)", results)
    for kind, timings in results.items():
        assert max(timings.values()) < 2 + 5, (kind, timings)  # the request timeout, and room for a busy machine


# -- a lossy, slow consumer link ---------------------------------------------------------------------

LOSS, DELAY, PINGS = 0.2, 0.2, 50


@pytest.mark.skipif(tun_missing() is not None, reason=tun_missing() or "")
async def test_an_impaired_link_delays_every_packet_and_drops_the_same_ones_for_the_same_seed():
    """The wire under the case below (tests/wire.py), pinged from the root namespace: two links
    with one seed answer the same pings, and a link with a delay and no loss answers all of
    them, each after two delays."""
    with Network() as network:
        links = {name: network.impaired_link("", network.namespace(name), loss=loss, delay=0.1, seed=7)
                 for name, loss in (("twin1", 0.5), ("twin2", 0.5), ("slow", 0.0))}
        answered: dict[str, dict[int, float]] = {}

        async def ping(name: str) -> None:
            answered[name] = await round_trips(network, "", links[name].address(name), count=40, timeout=1)
        async with trio.open_nursery() as nursery:
            for name in links:
                nursery.start_soon(ping, name)
    assert 0 < len(answered["twin1"]) < 20 and set(answered["twin1"]) == set(answered["twin2"]), answered  # 10 expected
    slow = answered["slow"].values()
    assert len(slow) == 40 and 0.2 <= min(slow) and max(slow) < 0.2 + 0.5, answered


async def lossy_consumer(kind: str, network: Network, folder) -> dict:
    network.namespace("nsqd")
    network.namespace("consumer")
    to_nsqd = network.link("", "nsqd")
    consumer_link = network.impaired_link("consumer", "nsqd", loss=LOSS, delay=DELAY, seed=25)
    nsqd_address = to_nsqd.address("nsqd")
    start_nsqd(kind, network, "nsqd", folder, "0.0.0.0", nsqd_address)
    pings = list((await round_trips(network, "consumer", consumer_link.address("nsqd"), PINGS, timeout=2)).values())
    await wait_listening(nsqd_address, 4150)
    # each exchange may need several retransmissions: generous bounds, and the handshake in one go
    consumer = await connect_from(network, "consumer", consumer_link.address("nsqd"), 4150, timeout=60)
    # messages time out after 1.5 s (production: 60 s), so that a FIN lost and sent again comes late
    await consumer.send(Identify({"msg_timeout": 1500}).to_bytes() + b"SUB t c\nRDY 20\n")
    for _ in ("IDENTIFY", "SUB"):
        assert (await consumer.read_frame(timeout=60)).data == b"OK"
    bodies = [b"m %d" % n for n in range(100)]
    attempts: dict[bytes, list[int]] = {}  # each body's deliveries, by their attempts
    late_fins = []
    stats_url = f"http://{nsqd_address}:4151/stats"

    async def consume() -> None:
        while True:
            frame = await consumer.read_frame(timeout=60)
            if frame.frame_type == FRAME_TYPE_ERROR:  # a FIN after the message timed out: not fatal
                assert frame.data.startswith(b"E_FIN_FAILED"), frame
                late_fins.append(frame.data)
                continue
            message = decode_message(frame.data)
            attempts.setdefault(message.body, []).append(message.attempts)
            await consumer.send(b"FIN " + message.id + b"\n")

    async def settled() -> bool:
        """nsqd holds nothing, and every delivery it made and every FIN's answer reached the consumer:
        each timeout adds a delivery, whose message is then FINed twice, once too late."""
        channel = (await get_json(stats_url, format="json", topic="t"))["topics"][0]["channels"][0]
        return (channel["in_flight_count"] == channel["depth"] == channel["deferred_count"] == 0
                and sum(map(len, attempts.values())) == len(bodies) + channel["timeout_count"]
                and len(late_fins) == channel["timeout_count"])

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await publish(nsqd_address, 4150, "t", bodies)
        delivered = await until(lambda: len(attempts) == len(bodies), 120, "every message delivered")
        # usually 7-14 s; when the link stalls past msg_timeout again and again, redeliveries pile up
        # (30 s in one run of 12)
        await until(settled, 120, "nothing in flight or queued, and a delivery and a late FIN for each timeout")
        nursery.cancel_scope.cancel()
    await consumer.close()
    channel = (await get_json(stats_url, format="json", topic="t"))["topics"][0]["channels"][0]
    return {"pings answered": len(pings), "ping round trips": pings,
            "ping round trip (median)": sorted(pings)[len(pings) // 2] if pings else None,
            "every message delivered in": delivered,
            "settled in": time.monotonic() - started, "attempts": attempts, "late FINs": len(late_fins),
            "deliveries": sum(map(len, attempts.values())), "timeouts counted by nsqd": channel["timeout_count"],
            "requeues counted by nsqd": channel["requeue_count"], "messages counted by nsqd": channel["message_count"]}


@pytest.mark.skipif(tun_missing() is not None, reason=tun_missing() or "")
async def test_a_lossy_slow_consumer_link_delivers_everything(tmp_path):
    """20 % loss and 200 ms delay each way (a wire in user space, tests/wire.py; pings across it
    prove the impairment): delivery goes on, every message arrives, each redelivery is one of
    the timeouts nsqd counts and comes with its attempts one higher, and in the end nothing is
    in flight or queued."""
    results = await side_by_side(lossy_consumer, tmp_path)
    report("a consumer link with 20 % loss and 200 ms delay each way (msg_timeout 1.5 s)",
           {kind: {name: value for name, value in result.items() if name not in ("attempts", "ping round trips")}
            for kind, result in results.items()})
    for kind, result in results.items():
        assert 0 < PINGS - result["pings answered"] < PINGS / 2, (kind, result["pings answered"])  # ~36 % expected
        assert 2 * DELAY <= min(result["ping round trips"]), (kind, result["ping round trips"])
        assert result["ping round trip (median)"] < 2 * DELAY + 0.5, (kind, result["ping round trips"])
        assert sorted(result["attempts"]) == sorted(b"m %d" % n for n in range(100)), kind
        assert all(seen == list(range(1, len(seen) + 1)) for seen in result["attempts"].values()), kind
        assert result["deliveries"] == 100 + result["timeouts counted by nsqd"], (kind, result)
        assert result["timeouts counted by nsqd"] > 0, (kind, result)  # at 1.5 s, every run had dozens
        assert result["requeues counted by nsqd"] == 0 and result["messages counted by nsqd"] == 100, (kind, result)
