"""Creating a topic while nsqlookupd is connected, beside NSQ v1.3.0's own daemons.

NSQ's GetTopic (nsqd/nsqd.go) creates the topic, registers it, asks the connected lookupds
for the topic's channels (a blocking call), creates the non-ephemeral ones, starts the
topic's messagePump, and only then returns, so the command that created the topic (SUB,
PUB, MPUB, DPUB, POST /pub, /mpub, /topic/create) is answered after that. A command for the
same topic meanwhile gets the topic at once, not started: its messages wait in the topic
for the channels the topic starts with. Each scenario runs against Go's nsqd and
nsqlookupd and against ours, and must give NSQ's outcome on both. Last, ours alone: creating
a topic never holds the event loop, and AUTH's checks keep the wait.
"""

import gc
import itertools
import json
import socket
import time

import httpx
import pytest
import trio

from common.commands import Auth, Dpub, Mpub, Pub, Sub
from common.protocol_v1 import NEED_DATA, Identify, ServerParser, encode_response
from serving.http import HTTPServer, Response
from serving.listeners import bound_port, open_listeners

from .admin_helpers import AdminProcess, closed_port_address
from .auth_helpers import auth_server  # noqa: F401 (a fixture)
from .go_nsq import GoAdminProcess, GoLookupdProcess, GoNsqdProcess, requires_go
from .helpers import NsqdProcess, RawClient
from .lookupd_helpers import LookupdProcess
from .waiting import await_until, wait_until

DAEMONS = {"go": (GoNsqdProcess, GoLookupdProcess, GoAdminProcess), "ours": (NsqdProcess, LookupdProcess, AdminProcess)}
_names = itertools.count()


def new_topic() -> str:
    return f"fresh{next(_names)}"


class Cluster:
    """nsqlookupd and one nsqd registered with it, of one kind, and both kinds of nsqadmin in front."""

    def __init__(self, kind: str, data_dir):
        nsqd_class, lookupd_class, _ = DAEMONS[kind]
        self.lookupd = lookupd_class("--broadcast-address=127.0.0.1")
        self.lookupd_url = f"http://127.0.0.1:{self.lookupd.http_port}"
        self.nsqd = nsqd_class(f"--data-path={data_dir}", "--broadcast-address=127.0.0.1",
                               f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}")
        self.nsqd_url = f"http://127.0.0.1:{self.nsqd.http_port}"
        self.admins = {name: admin_class(f"--lookupd-http-address=127.0.0.1:{self.lookupd.http_port}")
                       for name, (_, _, admin_class) in DAEMONS.items()}
        wait_until(self._asks_lookupd, what="nsqd asking nsqlookupd about new topics")

    def _asks_lookupd(self) -> bool:
        """Whether a topic created now gets the channel nsqlookupd knows for it (nsqd asks
        only once it has read nsqlookupd's IDENTIFY answer, and Go's once it stored it)."""
        topic = new_topic()
        httpx.post(f"{self.lookupd_url}/channel/create", params={"topic": topic, "channel": "probe"})
        httpx.post(f"{self.nsqd_url}/topic/create", params={"topic": topic})
        stats = httpx.get(f"{self.nsqd_url}/stats", params={"format": "json", "topic": topic}).json()
        return bool(stats["topics"][0]["channels"])

    def stop(self) -> list[int]:
        return [*(admin.stop() for admin in self.admins.values()), self.nsqd.stop(), self.lookupd.stop()]


@pytest.fixture(scope="module", params=sorted(DAEMONS))
def cluster(request, tmp_path_factory):
    running = Cluster(request.param, tmp_path_factory.mktemp(request.param))
    yield running
    assert running.stop() == [0, 0, 0, 0]


async def topic_stats(http: httpx.AsyncClient, nsqd_url: str, topic: str) -> dict | None:
    answer = await http.get(f"{nsqd_url}/stats", params={"format": "json", "topic": topic})
    return (answer.json()["topics"] or [None])[0]


def channel_depths(stats: dict) -> dict[str, int]:
    return {channel["channel_name"]: channel["depth"] for channel in stats["channels"]}


@requires_go
async def test_a_channel_created_after_the_first_publish_gets_only_later_messages(cluster):
    """The scenario first seen: a consumer's SUB creates the topic, then 211 messages, then a
    channel, then 347 more. In NSQ the SUB is answered once the topic has started, so the 211
    go to the consumer's channel only."""
    topic = new_topic()
    consumer = await RawClient.connect(cluster.nsqd.tcp_port)
    await consumer.sub(topic, "live")
    async with httpx.AsyncClient(base_url=cluster.nsqd_url) as http:
        assert (await http.post("/mpub", params={"topic": topic}, content=b"\n".join([b"m"] * 211))).text == "OK"
        assert (await http.post("/channel/create", params={"topic": topic, "channel": "idle"})).status_code == 200
        assert (await http.post("/mpub", params={"topic": topic}, content=b"\n".join([b"m"] * 347))).text == "OK"
        assert channel_depths(await topic_stats(http, cluster.nsqd_url, topic)) == {"live": 558, "idle": 347}
    await consumer.close()


async def _tcp(port: int, command: bytes) -> None:
    client = await RawClient.connect(port)
    await client.send(command)
    assert await client.read_response() == b"OK"
    await client.close()


async def _http(cluster: Cluster, path: str, topic: str, body: bytes = b"") -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{cluster.nsqd_url}{path}", params={"topic": topic}, content=body)
    assert answer.status_code == 200, answer.text


# (the command creating the topic, what the lookupds' channel then holds: depth, deferred)
CREATING_COMMANDS = {
    "SUB": (lambda cluster, topic: _tcp(cluster.nsqd.tcp_port, Sub(topic, "mine").to_bytes()), (0, 0)),
    "PUB": (lambda cluster, topic: _tcp(cluster.nsqd.tcp_port, Pub(topic, b"x").to_bytes()), (1, 0)),
    "MPUB": (lambda cluster, topic: _tcp(cluster.nsqd.tcp_port, Mpub(topic, [b"x", b"y"]).to_bytes()), (2, 0)),
    "DPUB": (lambda cluster, topic: _tcp(cluster.nsqd.tcp_port, Dpub(topic, 60000, b"x").to_bytes()), (0, 1)),
    "POST /pub": (lambda cluster, topic: _http(cluster, "/pub", topic, b"x"), (1, 0)),
    "POST /mpub": (lambda cluster, topic: _http(cluster, "/mpub", topic, b"x\ny"), (2, 0)),
    "POST /topic/create": (lambda cluster, topic: _http(cluster, "/topic/create", topic), (0, 0)),
}


@requires_go
@pytest.mark.parametrize("command", list(CREATING_COMMANDS))
async def test_the_creating_command_is_answered_once_the_cluster_channels_exist(cluster, command):
    """nsqlookupd knows channels of the topic (another nsqd's): when the command that creates
    the topic here is answered, the durable one exists and has its messages; the ephemeral
    one is not created."""
    topic = new_topic()
    async with httpx.AsyncClient() as http:
        for channel in ("known", "elsewhere#ephemeral"):
            query = {"topic": topic, "channel": channel}
            assert (await http.post(f"{cluster.lookupd_url}/channel/create", params=query)).status_code == 200
        run, (depth, deferred) = CREATING_COMMANDS[command]
        await run(cluster, topic)
        stats = await topic_stats(http, cluster.nsqd_url, topic)
    channels = {channel["channel_name"]: channel for channel in stats["channels"]}
    assert set(channels) == ({"known", "mine"} if command == "SUB" else {"known"})
    assert (channels["known"]["depth"], channels["known"]["deferred_count"]) == (depth, deferred)


class FakeLookupd:
    """An nsqlookupd stand-in: a V1 peer whose IDENTIFY answer names ``http_port``, with an HTTP
    API there that knows no channels of any topic (unless a subclass's ``answer`` says otherwise)
    or, if ``http`` is False, nothing listening there."""

    def __init__(self):
        self.tcp_port = self.http_port = 0

    async def start(self, nursery: trio.Nursery, http: bool = True) -> None:
        tcp = await open_listeners("127.0.0.1:0", "fake lookupd TCP")
        self.tcp_port = bound_port(tcp)
        await nursery.start(trio.serve_listeners, self._serve_peer, tcp)
        if http:
            listeners = await open_listeners("127.0.0.1:0", "fake lookupd HTTP")
            self.http_port = bound_port(listeners)
            await nursery.start(HTTPServer(self.answer, max_body_size=1024).serve, listeners)
        else:
            self.http_port = int(closed_port_address().rsplit(":", 1)[1])

    async def answer(self, request) -> Response:
        return Response(200, b'{"channels":[]}')

    async def _serve_peer(self, stream) -> None:
        parser = ServerParser()
        while data := await stream.receive_some(65536):
            parser.receive_data(data)
            while (command := parser.next_event()) is not NEED_DATA:
                answer = b"OK"
                if isinstance(command, Identify):
                    parser.identified = True
                    answer = json.dumps({"tcp_port": self.tcp_port, "http_port": self.http_port, "version": "1.3.0",
                                         "broadcast_address": "127.0.0.1", "hostname": "fake"}).encode()
                await stream.send_all(encode_response(answer))


class GatedLookupd(FakeLookupd):
    """A fake nsqlookupd that holds its answer to ``/channels?topic=<gated topic>`` until
    ``release(channels)``, so that topic stays not started for as long as a test needs; it
    knows no channels of any other topic."""

    def __init__(self, topic: str):
        super().__init__()
        self.topic = topic
        self.asked_about: set[str] = set()  # topics whose channels nsqd asked for
        self.queried = trio.Event()
        self._released = trio.Event()
        self._channels: list[str] = []

    def release(self, channels: list[str]) -> None:
        self._channels = channels
        self._released.set()

    async def wait_for_nsqd(self, nsqd_tcp_port: int) -> None:
        """Until nsqd asks about the topics it creates: a new topic's PUB is answered after
        the question, and nsqd asks only once it has read and stored our IDENTIFY answer."""
        warmups = (f"warmup{n}" for n in itertools.count())

        async def asked_about_a_warmup() -> bool:
            topic = next(warmups)
            await _tcp(nsqd_tcp_port, Pub(topic, b"x").to_bytes())
            return topic in self.asked_about

        await await_until(asked_about_a_warmup, what="nsqd asking about the topics it creates")

    async def answer(self, request) -> Response:
        topic = request.query.removeprefix("topic=")
        self.asked_about.add(topic)
        if topic != self.topic:
            return await super().answer(request)
        self.queried.set()
        await self._released.wait()
        return Response(200, json.dumps({"channels": self._channels}).encode())


class FailingLookupd(FakeLookupd):
    """A fake nsqlookupd whose every ``/channels`` answer is ``status`` with ``body``."""

    def __init__(self, status: int, body: bytes):
        super().__init__()
        self.status, self.body = status, body

    async def answer(self, request) -> Response:
        return Response(self.status, self.body)


@requires_go
@pytest.mark.parametrize("kind", sorted(DAEMONS))
async def test_a_command_for_a_topic_still_starting_is_answered_at_once(kind, tmp_path, nursery):
    """While the PUB that created the topic waits for the lookupds, another PUB for it is
    answered at once and its message waits in the topic; a channel can be created. Once the
    lookupds answer, the creating PUB is answered and both messages reach every channel the
    topic started with."""
    gated = GatedLookupd("starting")
    await gated.start(nursery)
    nsqd = DAEMONS[kind][0](f"--data-path={tmp_path}", f"--lookupd-tcp-address=127.0.0.1:{gated.tcp_port}")
    try:
        await gated.wait_for_nsqd(nsqd.tcp_port)
        creator = await RawClient.connect(nsqd.tcp_port)
        await creator.send(Pub("starting", b"first").to_bytes())
        with trio.fail_after(10):
            await gated.queried.wait()
        other = await RawClient.connect(nsqd.tcp_port)
        await other.send(Pub("starting", b"second").to_bytes())
        assert await other.read_response() == b"OK"
        url = f"http://127.0.0.1:{nsqd.http_port}"
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{url}/channel/create", params={"topic": "starting", "channel": "made"})
            assert answer.status_code == 200
            stats = await topic_stats(http, url, "starting")
            assert (stats["depth"], channel_depths(stats)) == (1, {"made": 0})
            await creator.assert_no_frame(within=0.1)  # it cannot be answered before the lookupds are
            gated.release(["known"])
            assert await creator.read_response() == b"OK"
            async def delivered_to_both() -> dict | None:
                stats = await topic_stats(http, url, "starting")
                return stats if channel_depths(stats) == {"known": 2, "made": 2} else None

            assert (await await_until(delivered_to_both, what="both channels holding both messages"))["depth"] == 0
    finally:
        assert nsqd.stop() == 0


# How the only nsqlookupd fails nsqd's question about a new topic's channels.
LOOKUPD_FAILURES = {
    "404 with a body": lambda: FailingLookupd(404, b'{"message":"NOT_FOUND"}'),
    "500 without": lambda: FailingLookupd(500, b""),
    "nothing at its HTTP port": lambda: FailingLookupd(200, b""),
}


async def failed_query_warning(nsqd, fake: FakeLookupd) -> str:
    """The warning of the first new topic whose question nsqd logs as failed (nsqd asks only once
    it has stored the lookupd's IDENTIFY answer), its topic and the lookupd's port named."""
    topics = (f"failing{n}" for n in itertools.count())

    async def warned() -> str | None:
        topic = next(topics)
        await _tcp(nsqd.tcp_port, Pub(topic, b"x").to_bytes())
        for line in nsqd.log().splitlines():
            if f"pre-create for topic {topic} -" in line:
                return line.split(" ", 3)[3].replace(topic, "TOPIC").replace(str(fake.http_port), "PORT")
        return None

    return await await_until(warned, what="a warning about the channels query")


@requires_go
@pytest.mark.parametrize("failure", list(LOOKUPD_FAILURES))
async def test_a_failed_channels_query_is_logged_in_nsqs_words(failure, tmp_path, nursery):
    """Go's nsqd and ours, each with one fake nsqlookupd that fails the question in the same way,
    log the same warning (NSQ's http_api client: ``got response 404 Not Found "..."``, or Go's
    words for a refused connect), and the topic starts all the same."""
    warnings = {}
    for kind in sorted(DAEMONS):
        fake = LOOKUPD_FAILURES[failure]()
        await fake.start(nursery, http=failure != "nothing at its HTTP port")
        nsqd = DAEMONS[kind][0](f"--data-path={tmp_path}", f"--lookupd-tcp-address=127.0.0.1:{fake.tcp_port}")
        try:
            warnings[kind] = await failed_query_warning(nsqd, fake)
        finally:
            assert nsqd.stop() == 0
    assert warnings["ours"] == warnings["go"]
    assert "WARNING: failed to query nsqlookupd for channels to pre-create for topic TOPIC - " in warnings["go"]


@requires_go
@pytest.mark.parametrize("admin", sorted(DAEMONS))
def test_nsqadmin_pauses_a_topic_created_a_moment_before(cluster, admin):
    """nsqadmin finds a topic's producers through nsqlookupd: right after /topic/create is
    answered, nsqd's REGISTER has reached nsqlookupd, so the pause reaches nsqd (Go's nsqadmin
    asks nsqlookupd within a millisecond or two)."""
    topic = new_topic()
    assert httpx.post(f"{cluster.nsqd_url}/topic/create", params={"topic": topic}).status_code == 200
    answer = httpx.post(f"{cluster.admins[admin].url}/api/topics/{topic}", json={"action": "pause"})
    assert answer.status_code == 200, answer.text
    stats = httpx.get(f"{cluster.nsqd_url}/stats", params={"format": "json", "topic": topic}).json()
    assert stats["topics"][0]["paused"] is True


class TaskStepCPU(trio.abc.Instrument):
    """The most CPU time one task step other than the test's own took on the event loop's thread (s)."""

    def __init__(self):
        self.longest = (0.0, "")
        self._test = trio.lowlevel.current_task()
        self._began = 0.0

    def before_task_step(self, task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task) -> None:
        if task is not self._test:
            self.longest = max(self.longest, (time.thread_time() - self._began, task.name))


def create_topic_blocking(port: int, topic: str) -> bytes:
    """POST /topic/create from a plain socket (in a worker thread: no work on the event loop)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST /topic/create?topic={topic} HTTP/1.1\r\nHost: nsqd\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n\r\n".encode())
        answer = b""
        while data := sock.recv(65536):
            answer += data
    return answer


@pytest.fixture
def lookupd():
    proc = LookupdProcess("--broadcast-address=127.0.0.1")
    yield proc
    proc.stop()


async def test_creating_topics_never_holds_the_event_loop(start_nsqd, lookupd):
    """Each new topic asks nsqlookupd for its channels; no task step of that (or of anything
    else) may take the loop for long. A new HTTP client per query took ~20 ms of CPU."""
    nsqd = await start_nsqd(lookupd_tcp_address=[f"127.0.0.1:{lookupd.tcp_port}"], broadcast_address="127.0.0.1")
    await await_until(nsqd.lookup.connected, what="nsqd connected to nsqlookupd")
    steps = TaskStepCPU()
    gc.collect()
    gc.disable()  # a collection of the test process's own garbage is not nsqd's doing
    trio.lowlevel.add_instrument(steps)
    try:
        for n in range(5):
            answer = await trio.to_thread.run_sync(create_topic_blocking, nsqd.http_port, f"loop{n}")
            assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        trio.lowlevel.remove_instrument(steps)
        gc.enable()
    assert all(nsqd.topics[f"loop{n}"].started for n in range(5))
    assert steps.longest[0] < 0.010, steps.longest


async def test_with_auth_a_publish_that_creates_a_topic_is_answered_once_it_started(start_nsqd, lookupd,
                                                                                    auth_server):  # noqa: F811
    nsqd = await start_nsqd(lookupd_tcp_address=[f"127.0.0.1:{lookupd.tcp_port}"], broadcast_address="127.0.0.1",
                            auth_http_address=[auth_server.address])
    await await_until(nsqd.lookup.connected, what="nsqd connected to nsqlookupd")
    client = await RawClient.connect(nsqd.tcp_port)
    await client.identify()
    await client.send(Auth(b"good").to_bytes())
    await client.read_response()
    await client.send(Pub("authed", b"x").to_bytes())
    assert await client.read_response() == b"OK"
    assert nsqd.topics["authed"].started and nsqd.topics["authed"].depth == 1
