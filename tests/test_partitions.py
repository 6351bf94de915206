"""Network partitions between the daemons, in network namespaces joined by veth pairs
(tests/netns.py), each case run against this project's daemons and NSQ v1.3.0's side by side,
on two networks of their own, with the timings printed beside each other.

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

from .datadir import pub
from .go_nsq import go_program, missing_reason
from .netns import Network, connect_from, netem_missing, skip_reason, wait_listening

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

async def lossy_consumer(kind: str, network: Network, folder) -> dict:
    network.namespace("nsqd")
    network.namespace("consumer")
    to_nsqd, consumer_link = network.link("", "nsqd"), network.link("consumer", "nsqd")
    for side in ("consumer", "nsqd"):
        network_tc = ["ip", "netns", "exec", network.name(side), "tc", "qdisc", "add", "dev",
                      consumer_link.device(side), "root", "netem", "loss", "20%", "delay", "200ms"]
        await trio.run_process(network_tc)
    nsqd_address = to_nsqd.address("nsqd")
    start_nsqd(kind, network, "nsqd", folder, "0.0.0.0", nsqd_address)
    await wait_listening(nsqd_address, 4150)
    consumer = await subscribe(network, "consumer", consumer_link.address("nsqd"), 4150, "t", "c", rdy=20,
                               msg_timeout=2000)
    bodies = [b"m %d" % n for n in range(100)]
    started = time.monotonic()
    await publish(nsqd_address, 4150, "t", bodies)
    got, redelivered = set(), 0
    while got != set(bodies):
        message = await consumer.read_message(timeout=60)
        redelivered += message.attempts > 1
        got.add(message.body)
        await consumer.send(b"FIN " + message.id + b"\n")
    stats = await get_json(f"http://{nsqd_address}:4151/stats", format="json")
    return {"100 messages delivered in": time.monotonic() - started, "redeliveries seen": redelivered,
            "timeouts counted by nsqd": stats["topics"][0]["channels"][0]["timeout_count"]}


@pytest.mark.skipif(netem_missing() is not None, reason=netem_missing() or "")
async def test_a_lossy_slow_consumer_link_delivers_everything(tmp_path):
    """20 % loss and 200 ms delay each way: delivery goes on, redeliveries are counted, nothing
    is lost."""
    results = await side_by_side(lossy_consumer, tmp_path)
    report("a consumer link with 20 % loss and 200 ms delay", results)
