"""nsqadmin in front of nsqd with --http-auth-required: --nsqd-auth-secret goes to nsqd (pages, API,
actions, the stats recorder's fetcher, the live tail's AUTH) and never to nsqlookupd. Real
processes: an auth server, nsqd, nsqlookupd and nsqadmin."""

import asyncio

import httpx
import pytest

from nsqadmin.history.stats_fetcher import FetchError, StatsFetcher

from .admin_helpers import AdminProcess, Tail, wait_for
from .auth_helpers import EVERYTHING, AuthServer
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess


class Secured:
    """An auth server, nsqlookupd, an nsqd that requires auth on TCP and HTTP, and nsqadmin with the secret."""

    def __init__(self, data_path):
        self.auth = AuthServer()
        self.auth.answers["operator"] = (200, EVERYTHING, 0)
        self.lookupd = LookupdProcess("--broadcast-address=127.0.0.1")
        self.nsqd = NsqdProcess(f"--data-path={data_path}", "--broadcast-address=127.0.0.1",
                                f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}",
                                f"--auth-http-address={self.auth.address}", "--http-auth-required")
        self.nsqd_http = f"127.0.0.1:{self.nsqd.http_port}"
        self.admin = AdminProcess(f"--lookupd-http-address=127.0.0.1:{self.lookupd.http_port}",
                                  "--nsqd-auth-secret=operator", "--enable-live-tail")

    def nsqd_post(self, path: str, body: bytes = b"", **params) -> httpx.Response:
        return httpx.post(f"http://{self.nsqd_http}{path}", params=params, content=body,
                          headers={"Authorization": "Bearer operator"})

    def stop(self) -> list[int]:
        codes = [self.admin.stop(), self.nsqd.stop(), self.lookupd.stop()]
        self.auth.close()
        return codes


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    running = Secured(tmp_path_factory.mktemp("nsqd"))
    yield running
    assert running.stop() == [0, 0, 0]


def registered(secured: Secured, topic: str) -> bool:
    answer = httpx.get(f"http://127.0.0.1:{secured.lookupd.http_port}/lookup", params={"topic": topic})
    return answer.status_code == 200 and bool(answer.json()["producers"])


def test_pages_api_and_actions_reach_nsqd_with_the_secret(secured):
    assert secured.nsqd_post("/pub", topic="secured", body=b"hello").status_code == 200
    wait_for(lambda: registered(secured, "secured"), what="secured registered")
    topic = httpx.get(f"{secured.admin.url}/api/topics/secured").json()
    assert (topic["message"], topic["depth"], topic["message_count"]) == ("", 1, 1)
    assert "secured" in httpx.get(f"{secured.admin.url}/topics/secured").text
    answer = httpx.post(f"{secured.admin.url}/api/topics/secured", json={"action": "pause"})
    assert answer.status_code == 200, answer.text
    stats = httpx.get(f"http://{secured.nsqd_http}/stats", params={"format": "json", "topic": "secured"},
                      headers={"Authorization": "Bearer operator"}).json()
    assert stats["topics"][0]["paused"] is True
    secrets = {request["values"]["secret"][0] for request in secured.auth.requests}
    assert secrets == {"operator"}
    # nsqlookupd never sees the secret: nsqadmin asked it without one and it answered
    assert registered(secured, "secured")


def test_without_the_secret_nsqd_refuses_nsqadmin_and_the_page_says_so(secured):
    bare = AdminProcess(f"--nsqd-http-address={secured.nsqd_http}")
    try:
        answer = httpx.get(f"{bare.url}/api/topics")
        assert answer.status_code == 502
        assert "got response 401 Unauthorized" in answer.json()["message"]
        assert "AUTH_REQUIRED" in answer.json()["message"]
        page = httpx.get(f"{bare.url}/")
        assert "401 Unauthorized" in page.text
    finally:
        assert bare.stop() == 0


def test_the_stats_fetcher_sends_the_secret(secured):
    async def fetch(secret: str):
        fetcher = StatsFetcher(2.0, 5.0, auth_secret=secret)
        try:
            return await fetcher.get(secured.nsqd_http, "/stats?format=json")
        except FetchError as exc:
            return exc
        finally:
            fetcher.close()

    assert b'"topics"' in asyncio.run(fetch("operator"))
    refused = asyncio.run(fetch(""))
    assert isinstance(refused, FetchError) and "401" in str(refused)


def test_the_live_tail_authenticates_its_consumer(secured):
    assert secured.nsqd_post("/topic/create", topic="secured_tail").status_code == 200
    assert secured.nsqd_post("/channel/create", topic="secured_tail", channel="keep").status_code == 200
    wait_for(lambda: registered(secured, "secured_tail"), what="secured_tail registered")
    tail = Tail(secured.admin.url, "secured_tail")
    try:
        wait_for(lambda: len(channels_of(secured, "secured_tail")) == 2, what="the tail's channel")
        assert secured.nsqd_post("/pub", topic="secured_tail", body=b"for the tail").status_code == 200
        assert tail.next("message")["body_text"] == "for the tail"
    finally:
        tail.close()


def channels_of(secured: Secured, topic: str) -> list[str]:
    stats = httpx.get(f"http://{secured.nsqd_http}/stats", params={"format": "json", "topic": topic},
                      headers={"Authorization": "Bearer operator"}).json()
    return [channel["channel_name"] for channel in stats["topics"][0]["channels"]]
