"""The nsqlookupd HTTP client nsqclient's consumers share (nsqclient/lookupd_http.py): one per
event loop, built in a worker thread, closed by the last consumer to stop; each consumer's
queries still carry its own Authorization header. The nsqlookupd here is a small HTTP server that
records what it is asked (the real one's answers are tested in test_client_cluster.py)."""

import json
import threading
from contextlib import AsyncExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from nsqclient import Consumer, Message

from .client_helpers import backend, run, unique, wait_for  # noqa: F401 (fixtures)


class RecordingLookupd:
    """Answers every /lookup with no producers and records (topic, Authorization header)."""

    def __init__(self):
        self.requests: list[tuple[str, str | None]] = []
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                topic = parse_qs(urlsplit(self.path).query)["topic"][0]
                recorded.append((topic, self.headers.get("Authorization")))
                body = json.dumps({"channels": [], "producers": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def queries(self, topic: str) -> int:
        return sum(1 for asked, _ in self.requests if asked == topic)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def lookupd():
    server = RecordingLookupd()
    yield server
    server.stop()


@pytest.fixture
def clients_built(monkeypatch):
    """Every httpx.AsyncClient built while the test runs, with the thread that built it."""
    built: list[tuple[httpx.AsyncClient, int]] = []
    original = httpx.AsyncClient.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append((self, threading.get_ident()))

    monkeypatch.setattr(httpx.AsyncClient, "__init__", recording_init)
    return built


async def ignore(message: Message) -> None:
    pass


def consumer(lookupd: RecordingLookupd, topic: str, **options) -> Consumer:
    return Consumer(topic, "ch", ignore, lookupd_http_addresses=[lookupd.address],
                    lookupd_poll_interval=0.05, lookupd_poll_jitter=0, **options)


def test_consumers_on_one_loop_share_one_client_built_off_the_loop(backend, lookupd, clients_built):
    topics = [unique() for _ in range(3)]

    async def body():
        loop_thread, before = threading.get_ident(), len(clients_built)
        async with consumer(lookupd, topics[0]):
            async with AsyncExitStack() as others:
                for topic in topics[1:]:
                    await others.enter_async_context(consumer(lookupd, topic))
                assert all(lookupd.queries(topic) >= 1 for topic in topics)
                assert [thread != loop_thread for _, thread in clients_built[before:]] == [True]
            still_polled = lookupd.queries(topics[0])
            await wait_for(lambda: lookupd.queries(topics[0]) >= still_polled + 2)
            assert not clients_built[before][0].is_closed
        return clients_built[before][0]

    shared = run(backend, body)
    assert shared.is_closed
    assert run(backend, body) is not shared  # another loop, another client


def test_each_consumer_queries_with_its_own_authorization(backend, lookupd):
    with_secret, without = unique(), unique()

    async def body():
        async with consumer(lookupd, with_secret, auth_secret="s3cret"), consumer(lookupd, without):
            await wait_for(lambda: lookupd.queries(with_secret) >= 2 and lookupd.queries(without) >= 2)

    run(backend, body)
    sent = {topic: {authorization for asked, authorization in lookupd.requests if asked == topic}
            for topic in (with_secret, without)}
    assert sent == {with_secret: {"Bearer s3cret"}, without: {None}}
