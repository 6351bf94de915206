"""--http-auth-required: nsqd's HTTP routes authorised by the auth server that answers AUTH, with
``Authorization: Bearer <secret>``, against a real nsqd and a real auth server."""

import httpx
import pytest
import trio

from common.commands import Auth, Pub
from common.goflags import FlagError
from nsqd.options import default_options

from .auth_helpers import EVERYTHING, ORDERS_ONLY, auth_server  # noqa: F401 (a fixture)
from .feature_helpers import certs  # noqa: F401 (a fixture)
from .helpers import RawClient

BILLING_ONLY = {"ttl": 3600, "identity": "carol", "authorizations": [
    {"permissions": ["subscribe"], "topic": "^orders$", "channels": ["^billing$"]}]}


@pytest.fixture
async def nsqd(start_nsqd, auth_server):
    auth_server.answers["billing"] = (200, BILLING_ONLY, 0)
    return await start_nsqd(auth_http_address=[auth_server.address], http_auth_required=True)


@pytest.fixture
async def http(nsqd):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as client:
        yield client


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


async def test_ping_and_info_stay_open(http):
    assert (await http.get("/ping")).text == "OK"
    assert (await http.get("/info")).json()["version"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic Z29vZDp4"}, {"Authorization": "Bearer"}])
@pytest.mark.parametrize("method, path", [("POST", "/pub?topic=t"), ("POST", "/mpub?topic=t"), ("GET", "/stats"),
                                          ("GET", "/metrics"), ("POST", "/topic/create?topic=t"),
                                          ("POST", "/channel/create?topic=t&channel=c"),
                                          ("POST", "/topic/delete?topic=t"), ("GET", "/config/log_level")])
async def test_every_other_route_needs_a_bearer_secret(nsqd, http, auth_server, headers, method, path):
    answer = await http.request(method, path, headers=headers, content=b"x")
    assert (answer.status_code, answer.json()) == (401, {"message": "AUTH_REQUIRED"})
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="nsqd"'
    assert answer.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert auth_server.requests == [] and "t" not in nsqd.topics


async def test_a_refused_secret_is_auth_failed(nsqd, http):
    answer = await http.post("/pub?topic=t", content=b"x", headers=bearer("unknown"))
    assert (answer.status_code, answer.json()) == (401, {"message": "AUTH_FAILED"})
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="nsqd"'
    assert "t" not in nsqd.topics


async def test_a_secret_without_grants_is_forbidden(nsqd, http, auth_server):
    auth_server.answers["nobody"] = (200, {"ttl": 60, "authorizations": []}, 0)
    answer = await http.get("/stats", headers=bearer("nobody"))
    assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"})


async def test_the_auth_server_is_asked_what_a_tcp_client_would_be_asked(nsqd, http, auth_server):
    assert (await http.post("/pub?topic=orders", content=b"x", headers=bearer("orders"))).status_code == 200
    [request] = auth_server.requests
    assert request["path"] == "/auth?common_name=&remote_ip=127.0.0.1&secret=orders&tls=false"
    assert request["headers"]["Accept"] == "application/vnd.nsq; version=1.0"


@pytest.mark.parametrize("method, path, secret, allowed", [
    ("POST", "/pub?topic=orders", "orders", True),
    ("POST", "/pub?topic=invoices", "orders", False),
    ("POST", "/mpub?topic=orders", "orders", True),
    ("POST", "/mpub?topic=orders", "billing", False),  # subscribe is not publish
    ("POST", "/topic/create?topic=orders", "orders", True),
    ("POST", "/topic/create?topic=orders", "billing", False),
    ("POST", "/channel/create?topic=orders&channel=billing", "orders", True),
    ("POST", "/channel/create?topic=orders&channel=shipping", "orders", False),
    ("POST", "/channel/create?topic=orders&channel=billing", "billing", True),
    ("POST", "/channel/max_attempts?topic=orders&channel=billing&max_attempts=3", "billing", True),
    ("POST", "/channel/max_attempts?topic=orders&channel=shipping&max_attempts=3", "orders", False),
    ("POST", "/channel/pace?topic=orders&channel=billing&rate=3", "billing", True),
    ("POST", "/channel/pace?topic=orders&channel=shipping&rate=3", "orders", False),
])
async def test_publish_and_channel_routes_need_the_grant_of_the_matching_tcp_command(
        nsqd, http, method, path, secret, allowed):
    if path.startswith("/channel/"):
        assert (await http.post("/topic/create?topic=orders", headers=bearer("good"))).status_code == 200
    if path.startswith(("/channel/max_attempts", "/channel/pace")):
        for channel in ("billing", "shipping"):
            answer = await http.post(f"/channel/create?topic=orders&channel={channel}", headers=bearer("good"))
            assert answer.status_code == 200
    answer = await http.request(method, path, content=b"x", headers=bearer(secret))
    if allowed:
        assert answer.status_code == 200, answer.text
        return
    assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"})
    assert set(nsqd.topics) <= {"orders"}
    if "max_attempts" in path:
        assert not nsqd.dead_letters.overrides
    elif "pace" in path:
        assert not nsqd.pacing.overrides
    else:
        assert not any(topic.channels for topic in nsqd.topics.values())


async def test_topic_actions_need_publish_and_subscribe_on_every_channel(nsqd, http):
    admin = bearer("good")
    assert (await http.post("/topic/create?topic=orders", headers=admin)).status_code == 200
    assert (await http.post("/channel/create?topic=orders&channel=billing", headers=admin)).status_code == 200
    for action in ("pause", "unpause", "empty", "ttl"):
        answer = await http.post(f"/topic/{action}?topic=orders&ttl=1m", headers=bearer("orders"))
        assert answer.status_code == 200, (action, answer.text)
    assert (await http.post("/topic/pause?topic=orders", headers=bearer("billing"))).status_code == 403
    assert (await http.post("/channel/create?topic=orders&channel=shipping", headers=admin)).status_code == 200
    answer = await http.post("/topic/delete?topic=orders", headers=bearer("orders"))
    assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"})
    assert "orders" in nsqd.topics
    assert (await http.post("/topic/delete?topic=orders", headers=admin)).status_code == 200


async def test_channel_actions_need_subscribe_on_that_channel(nsqd, http):
    admin = bearer("good")
    assert (await http.post("/topic/create?topic=orders", headers=admin)).status_code == 200
    for channel in ("billing", "shipping"):
        assert (await http.post(f"/channel/create?topic=orders&channel={channel}", headers=admin)).status_code == 200
    for action in ("pause", "unpause", "empty", "delete"):
        answer = await http.post(f"/channel/{action}?topic=orders&channel=billing", headers=bearer("billing"))
        assert answer.status_code == 200, (action, answer.text)
        answer = await http.post(f"/channel/{action}?topic=orders&channel=shipping", headers=bearer("billing"))
        assert answer.status_code == 403, action
    assert set(nsqd.topics["orders"].channels) == {"shipping"}


async def test_config_needs_the_grant_of_everything(nsqd, http):
    assert (await http.get("/config/log_level", headers=bearer("orders"))).status_code == 403
    answer = await http.put("/config/log_level", content=b"debug", headers=bearer("orders"))
    assert answer.status_code == 403 and nsqd.opts.log_level == "info"
    answer = await http.put("/config/log_level", content=b"info", headers=bearer("good"))
    assert answer.status_code == 200 and nsqd.opts.log_level == "info"
    assert (await http.get("/config/log_level", headers=bearer("good"))).status_code == 200


async def test_bad_arguments_get_the_routes_own_errors_once_the_secret_is_good(http):
    answer = await http.post("/pub", content=b"x", headers=bearer("orders"))
    assert (answer.status_code, answer.json()) == (400, {"message": "MISSING_ARG_TOPIC"})
    answer = await http.post("/channel/create?topic=orders&channel=a%20b", headers=bearer("orders"))
    assert (answer.status_code, answer.json()) == (400, {"message": "INVALID_ARG_CHANNEL"})
    assert (await http.get("/nowhere")).status_code == 404


async def test_stats_and_metrics_show_only_the_topics_the_grants_name(nsqd, http):
    admin = bearer("good")
    for topic in ("orders", "invoices"):
        assert (await http.post(f"/pub?topic={topic}", content=b"x", headers=admin)).status_code == 200
    everything = (await http.get("/stats?format=json", headers=admin)).json()
    assert [t["topic_name"] for t in everything["topics"]] == ["invoices", "orders"]
    mine = (await http.get("/stats?format=json", headers=bearer("billing"))).json()
    assert [t["topic_name"] for t in mine["topics"]] == ["orders"]
    hidden = (await http.get("/stats?format=json&topic=invoices", headers=bearer("billing"))).json()
    assert (hidden["topics"], hidden["producers"]) == (None, None)
    text = (await http.get("/stats", headers=bearer("billing"))).text
    assert "[orders" in text and "invoices" not in text
    metrics = (await http.get("/metrics", headers=bearer("billing"))).text
    assert 'topic="orders"' in metrics and "invoices" not in metrics


async def test_producers_show_only_their_counts_for_shown_topics(nsqd, http):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.identify()
    await client.send(Auth(b"good").to_bytes())
    await client.read_response()
    await client.send(Pub("orders", b"x").to_bytes() + Pub("invoices", b"y").to_bytes())
    assert [await client.read_response() for _ in range(2)] == [b"OK", b"OK"]
    [producer] = (await http.get("/stats?format=json", headers=bearer("billing"))).json()["producers"]
    assert producer["pub_counts"] == [{"topic": "orders", "count": 1}]
    await client.close()


async def test_an_answer_is_kept_for_its_ttl_and_shared_by_concurrent_requests(nsqd, http, auth_server):
    auth_server.answers["slow"] = (200, dict(EVERYTHING, ttl=1), 0.3)

    async def publish():
        assert (await http.post("/pub?topic=t", content=b"x", headers=bearer("slow"))).status_code == 200

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(publish)
    await publish()
    assert len(auth_server.requests) == 1
    await trio.sleep(1.1)  # deliberate: past the answer's 1 s TTL
    auth_server.answers["slow"] = (200, dict(ORDERS_ONLY, ttl=1), 0)
    assert (await http.post("/pub?topic=t", content=b"x", headers=bearer("slow"))).status_code == 403
    assert len(auth_server.requests) == 2


async def test_https_sends_the_tls_state_and_certificate_common_name(start_nsqd, auth_server, certs):
    nsqd = await start_nsqd(auth_http_address=[auth_server.address], http_auth_required=True,
                            tls_client_auth_policy="require-verify", tls_root_ca_file=certs.ca_file,
                            **certs.nsqd_options())
    leaf = certs.ca.issue_cert("ops.example", common_name="ops-7")
    with leaf.private_key_and_cert_chain_pem.tempfile() as pem:
        context = certs.client_context()
        context.load_cert_chain(pem)
        async with httpx.AsyncClient(verify=context) as https:
            answer = await https.post(f"https://127.0.0.1:{nsqd.https_port}/pub?topic=t", content=b"x",
                                      headers=bearer("good"))
    assert answer.status_code == 200
    values = auth_server.requests[0]["values"]
    assert (values["tls"], values["common_name"], values["remote_ip"]) == (["true"], ["ops-7"], ["127.0.0.1"])


def test_the_flag_needs_an_auth_server():
    with pytest.raises(FlagError, match="--http-auth-required needs --auth-http-address"):
        default_options(http_auth_required=True)
