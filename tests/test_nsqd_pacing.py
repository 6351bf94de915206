"""Channel pacing (--channel-pace, POST /channel/pace) against real nsqd processes: the pace holds
across every consumer of the channel, persists in nsqd.dat, shows in /stats and /metrics, and 0
lifts it. Rates are checked as the guarantee reads (README "Pace a channel"): N deliveries take
at least (N - burst) / pace seconds; a loaded machine only makes them slower."""

import time

import httpx
import pytest
import trio

from common.goflags import FlagError
from nsqd.options import default_options, load_options
from nsqd.pacing import BURST_SECONDS

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, nsqd_dat, publish, restart, subscribe
from .helpers import NsqdProcess, RawClient


def post(server: Server, path: str, **params) -> httpx.Response:
    return httpx.post(f"{server.http}{path}", params=params)


def channel_stats(server: Server, topic: str, channel: str) -> dict:
    document = httpx.get(f"{server.http}/stats", params={"format": "json", "topic": topic}).json()
    return next(c for c in document["topics"][0]["channels"] if c["channel_name"] == channel)


def burst(pace: int) -> int:
    return max(1, int(pace * BURST_SECONDS))


async def consume(clients: list[RawClient], count: int, started: float,
                  deadline: float = 30.0) -> tuple[list[int], float]:
    """FIN messages on ``clients`` until ``count`` have come in all; how many each got, and the seconds
    from ``started`` (before the first could be delivered) to the last one."""
    got = [0] * len(clients)
    done = trio.Event()

    async def take(index: int, client: RawClient) -> None:
        while sum(got) < count:
            message = await client.read_message(timeout=deadline)
            got[index] += 1
            await client.send(b"FIN " + message.id + b"\n")
        done.set()

    with trio.fail_after(deadline):
        async with trio.open_nursery() as nursery:
            for index, client in enumerate(clients):
                nursery.start_soon(take, index, client)
            await done.wait()
            nursery.cancel_scope.cancel()
    return got, time.monotonic() - started


async def test_the_pace_holds_across_every_consumer_and_lifts_at_zero(tmp_path):
    server = Server(tmp_path)
    await publish(server.tcp_port, "jobs", [b"job-%d" % i for i in range(200)])
    assert post(server, "/channel/create", topic="jobs", channel="workers").status_code == 200
    assert post(server, "/channel/pace", topic="jobs", channel="workers", rate="20").status_code == 200
    started = time.monotonic()  # the bucket holds at most its burst now, whatever came before
    clients = [await subscribe(server.tcp_port, "jobs", "workers", rdy=100) for _ in range(2)]
    got, seconds = await consume(clients, 40, started)
    assert seconds >= (sum(got) - burst(20)) / 20 - 0.05  # the token bucket's bound, whatever the RDY
    assert min(got) >= 5, got  # both consumers are served, in turn
    stats = channel_stats(server, "jobs", "workers")
    assert stats["pace"] == 20 and stats["depth"] >= 200 - sum(got) - stats["in_flight_count"]
    assert 'nsq_channel_pace{topic="jobs",channel="workers"} 20' in httpx.get(f"{server.http}/metrics").text

    assert post(server, "/channel/pace", topic="jobs", channel="workers", rate="0").status_code == 200
    rest, seconds = await consume(clients, 200 - sum(got), time.monotonic())
    assert seconds < 5  # unpaced: the 160 left come at once (a paced 160 would take 8 s)
    assert "pace" not in channel_stats(server, "jobs", "workers")  # unpaced: NSQ's keys only
    assert server.stop() == 0


async def test_requeued_and_deferred_messages_are_paced_too(tmp_path):
    server = Server(tmp_path)
    assert post(server, "/topic/create", topic="retry").status_code == 200
    assert post(server, "/channel/create", topic="retry", channel="c").status_code == 200
    assert post(server, "/channel/pace", topic="retry", channel="c", rate="10").status_code == 200
    await publish(server.tcp_port, "retry", [b"r-%d" % i for i in range(10)])
    client = await subscribe(server.tcp_port, "retry", "c", rdy=50)
    started = time.monotonic()
    for _ in range(20):  # each message REQ'd once, then FINished
        message = await client.read_message(timeout=10)
        verb = b"REQ " if message.attempts == 1 else b"FIN "
        await client.send(verb + message.id + (b" 0\n" if verb == b"REQ " else b"\n"))
    assert time.monotonic() - started >= (20 - burst(10)) / 10 - 0.05
    stats = channel_stats(server, "retry", "c")
    assert (stats["requeue_count"], stats["depth"]) == (10, 0)
    assert server.stop() == 0


async def test_the_pace_is_kept_in_nsqd_dat_and_the_flag_is_every_channels_default(tmp_path):
    server = Server(tmp_path, "--channel-pace=5")
    assert post(server, "/topic/create", topic="t").status_code == 200
    for channel in ("own", "default"):
        assert post(server, "/channel/create", topic="t", channel=channel).status_code == 200
    assert post(server, "/channel/pace", topic="t", channel="own", rate="7").status_code == 200
    assert [channel_stats(server, "t", c)["pace"] for c in ("own", "default")] == [7, 5]
    assert b'{"name":"own","paused":false,"pace":7}' in nsqd_dat(tmp_path)
    assert b'{"name":"default","paused":false}' in nsqd_dat(tmp_path)  # the flag's pace is not a channel's own

    server = restart(server)  # no flag: the channel's own pace stays, the other is unpaced
    assert channel_stats(server, "t", "own")["pace"] == 7
    assert "pace" not in channel_stats(server, "t", "default")
    assert post(server, "/channel/pace", topic="t", channel="own", rate="default").status_code == 200
    assert "pace" not in channel_stats(server, "t", "own") and b"pace" not in nsqd_dat(tmp_path)
    assert server.stop() == 0


@pytest.mark.parametrize("params, status, message", [
    ({"rate": "abc"}, 400, "INVALID_ARG_RATE"),
    ({"rate": "-1"}, 400, "INVALID_ARG_RATE"),
    ({"rate": "1.5"}, 400, "INVALID_ARG_RATE"),
    ({"rate": "1e30"}, 400, "INVALID_ARG_RATE"),
    ({"rate": "1000000001"}, 400, "INVALID_ARG_RATE"),
    ({"rate": "\u0661"}, 400, "INVALID_ARG_RATE"),  # a digit, but not an ASCII one
    ({}, 400, "MISSING_ARG_RATE"),
    ({"rate": "5", "channel": "nosuch"}, 404, "CHANNEL_NOT_FOUND"),
    ({"rate": "5", "topic": "nosuch"}, 404, "TOPIC_NOT_FOUND"),
    ({"rate": "5", "channel": "bad name!"}, 400, "INVALID_ARG_CHANNEL"),
])
def test_bad_paces_get_nsq_style_errors(shared_server, params, status, message):
    response = post(shared_server, "/channel/pace", **{"topic": "t", "channel": "c", **params})
    assert (response.status_code, response.json()) == (status, {"message": message})
    assert "pace" not in channel_stats(shared_server, "t", "c")  # nothing changed


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    server = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('pace')}")  # not one kill_leftover_servers stops
    server.http = f"http://127.0.0.1:{server.http_port}"
    assert post(server, "/topic/create", topic="t").status_code == 200
    assert post(server, "/channel/create", topic="t", channel="c").status_code == 200
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize("argv", [["--channel-pace=-1"], ["--channel-pace=abc"], ["--channel-pace=1000000001"]])
def test_bad_pace_flags_are_refused(argv):
    with pytest.raises(FlagError):
        load_options(argv)


def test_the_config_file_key(tmp_path):
    config = tmp_path / "nsqd.cfg"
    config.write_text("channel_pace = 250\n")
    assert load_options([f"--config={config}"]).channel_pace == 250
    assert default_options().channel_pace == 0
