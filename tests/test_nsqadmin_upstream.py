"""nsqadmin when parts of the cluster fail: a node that is down or hangs never breaks a page or an API
answer (NSQ's partial "WARNING: ..." message), 502 UPSTREAM_ERROR only when nothing answers; nsqadmin
pointed straight at nsqd (--nsqd-http-address); nsqd behind --tls-required reached over HTTPS."""

import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from .admin_helpers import (AdminProcess, RecordingEndpoint, SilentServer, closed_port_address, cluster,  # noqa: F401
                            topic_on)
from .feature_helpers import Certificates
from .helpers import NsqdProcess


@pytest.fixture(scope="module", autouse=True)
def shared_topic(cluster):
    """Topic "shared" with channel c and one message on each nsqd."""
    topic_on(cluster, "shared", "c", (1, 1))


@pytest.fixture
def admin_processes():
    started = []

    def start(*args: str) -> AdminProcess:
        started.append(AdminProcess(*args))
        return started[-1]

    yield start
    for admin in started:
        assert admin.stop() == 0


def test_nsqd_mode_with_one_address_down_warns_and_shows_the_rest(cluster, admin_processes):
    dead = closed_port_address()
    admin = admin_processes(f"--nsqd-http-address={cluster.node(0)}", f"--nsqd-http-address={dead}")
    body = httpx.get(f"{admin.url}/api/topics").json()
    assert body["topics"] == ["shared"]
    assert body["message"] == f'WARNING: Get "http://{dead}/stats?format=json&include_clients=false": ' \
                              f"dial tcp {dead}: connect: connection refused"
    nodes = httpx.get(f"{admin.url}/api/nodes").json()
    assert [n["http_port"] for n in nodes["nodes"]] == [cluster.nsqds[0].http_port]
    assert nodes["nodes"][0]["remote_addresses"] is None and nodes["message"].startswith("WARNING: ")
    topic = httpx.get(f"{admin.url}/api/topics/shared").json()
    assert topic["message"].startswith("WARNING: ") and topic["message_count"] == 1
    page = httpx.get(f"{admin.url}/topics/shared")
    assert page.status_code == 200 and "Partial results" in page.text and dead in page.text


def test_everything_down_is_a_502(admin_processes):
    dead = closed_port_address()
    admin = admin_processes(f"--lookupd-http-address={dead}")
    answer = httpx.get(f"{admin.url}/api/topics")
    assert answer.status_code == 502
    assert answer.json()["message"] == (f'UPSTREAM_ERROR: failed to query any nsqlookupd: Get "http://{dead}/topics": '
                                        f"dial tcp {dead}: connect: connection refused")
    page = httpx.get(f"{admin.url}/", headers={"Accept": "text/html"})
    assert page.status_code == 502 and "The cluster did not answer" in page.text and "connection refused" in page.text


def test_a_hanging_lookupd_costs_one_request_timeout(cluster, admin_processes):
    silent = SilentServer()
    admin = admin_processes(f"--lookupd-http-address={cluster.lookupd_http}",
                            f"--lookupd-http-address={silent.address}", "--http-client-request-timeout=1s")
    started = time.monotonic()
    body = httpx.get(f"{admin.url}/api/topics/shared").json()
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 3.0
    assert body["message_count"] == 2 and len(body["nodes"]) == 2
    assert body["message"] == (f'WARNING: Get "http://{silent.address}/lookup?topic=shared": '
                               f"context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
    page = httpx.get(f"{admin.url}/topics/shared/c", timeout=10)
    assert page.status_code == 200 and silent.address in page.text
    silent.close()


def test_a_node_answering_garbage_is_a_warning(cluster, admin_processes):
    admin = admin_processes(f"--nsqd-http-address={cluster.node(0)}", f"--nsqd-http-address={cluster.lookupd_http}")
    body = httpx.get(f"{admin.url}/api/nodes").json()  # the lookupd answers /info but no nsqd /stats
    assert [n["http_port"] for n in body["nodes"]] == [cluster.nsqds[0].http_port]
    assert body["message"].startswith("WARNING: got response 404 Not Found")


def test_nsqd_mode_actions_reach_every_nsqd(cluster, admin_processes):
    admin = admin_processes(f"--nsqd-http-address={cluster.node(0)}", f"--nsqd-http-address={cluster.node(1)}")
    answer = httpx.post(f"{admin.url}/api/topics", json={"topic": "direct", "channel": "d"})
    assert answer.json() == {"message": ""}
    for n in (0, 1):
        stats = httpx.get(f"http://{cluster.node(n)}/stats", params={"format": "json", "topic": "direct"}).json()
        assert [c["channel_name"] for c in stats["topics"][0]["channels"]] == ["d"]
    assert httpx.get(f"{admin.url}/api/topics/direct").json()["nodes"][0]["node"] in (cluster.node(0), cluster.node(1))
    assert httpx.post(f"{admin.url}/api/topics/direct/d", json={"action": "pause"}).json() == {"message": ""}
    channel = httpx.get(f"{admin.url}/api/topics/direct/d").json()
    assert channel["paused"] is True and len(channel["nodes"]) == 2
    assert httpx.get(f"{admin.url}/api/topics", params={"inactive": "true"}).json() == {"topics": {}, "message": ""}


def test_nsqd_requiring_tls_is_reached_over_https(tmp_path, admin_processes):
    certs = Certificates(tmp_path)
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--broadcast-address=127.0.0.1", "--tls-required=true",
                       f"--tls-cert={certs.cert_file}", f"--tls-key={certs.key_file}", "--https-address=127.0.0.1:0")
    try:
        plain = f"127.0.0.1:{nsqd.http_port}"
        assert httpx.get(f"http://{plain}/ping").status_code == 403
        admin = admin_processes(f"--nsqd-http-address={plain}", f"--http-client-tls-root-ca-file={certs.ca_file}")
        assert httpx.post(f"{admin.url}/api/topics", json={"topic": "secure"}).json()["message"] == ""
        body = httpx.get(f"{admin.url}/api/topics").json()
        assert body == {"topics": ["secure"], "message": ""}
        untrusting = admin_processes(f"--nsqd-http-address={plain}")
        answer = httpx.get(f"{untrusting.url}/api/topics")
        assert answer.status_code == 502 and "CERTIFICATE_VERIFY_FAILED" in answer.json()["message"]
        insecure = admin_processes(f"--nsqd-http-address={plain}", "--http-client-tls-insecure-skip-verify")
        assert httpx.get(f"{insecure.url}/api/topics").json()["topics"] == ["secure"]
    finally:
        nsqd.stop()


def test_graphite_rate_and_render_proxy(admin_processes):
    """--graphite-url: /api/graphite asks Graphite as NSQ does; --proxy-graphite serves <base>/render."""
    rates = {"up": 120.0, "down": -5.0}

    def graphite(path):
        target = parse_qs(urlsplit(path).query)["target"][0]
        return 200, [{"target": target, "datapoints": [[rates.get(target), 1700000000], [1.0, 1700000010]]}]

    fake = RecordingEndpoint(graphite)
    admin = admin_processes(f"--nsqd-http-address={closed_port_address()}", "--statsd-interval=30s", "--proxy-graphite",
                            f"--graphite-url=http://ops:s3cret@{fake.address}")
    assert httpx.get(f"{admin.url}/api/graphite", params={"metric": "rate", "target": "up"}).json() == {"rate": "4.00"}
    assert fake.requests[0]["path"] == "/render?format=json&from=-60sec&target=up&until=-30sec"
    assert httpx.get(f"{admin.url}/api/graphite", params={"metric": "rate", "target": "down"}).json() == {"rate": "N/A"}
    proxied = httpx.get(f"{admin.url}/render", params={"target": "up", "format": "json"})
    assert proxied.status_code == 200 and proxied.json()[0]["datapoints"][0] == [120.0, 1700000000]
    assert fake.requests[-1]["path"] == "/render?target=up&format=json"
    assert fake.requests[-1]["headers"]["Authorization"] == "Basic b3BzOnMzY3JldA=="  # ops:s3cret
    fake.close()
