"""AUTH against a real auth HTTP server (NSQ v1.3's internal/auth/authorizations.go): the request nsqd makes, the
answer's checks, TTL refresh, and what PUB/MPUB/DPUB/SUB are then allowed."""

import json

import httpx
import pytest
import trio

from common.commands import Auth, Dpub, Mpub, Pub
from nsqd.auth import AuthError, parse_auth_state

from .auth_helpers import EVERYTHING, ORDERS_ONLY, AuthServer, auth_server  # noqa: F401 (a fixture)
from .feature_helpers import certs, connect  # noqa: F401 (certs is a fixture)
from .helpers import RawClient

@pytest.fixture
async def nsqd(start_nsqd, auth_server):
    return await start_nsqd(auth_http_address=[auth_server.address])


async def authed_client(nsqd, secret: bytes, **identify) -> tuple[RawClient, dict]:
    client = await RawClient.connect(nsqd.tcp_port)
    await client.identify(**identify)
    await client.send(Auth(secret).to_bytes())
    return client, json.loads(await client.read_response())


async def test_identify_says_auth_is_required(nsqd):
    _, answer = await connect(nsqd.tcp_port)
    assert answer["auth_required"] is True


@pytest.mark.parametrize("command, name", [
    (Pub("t", b"x"), "PUB"), (Mpub("t", [b"x"]), "MPUB"), (Dpub("t", 10, b"x"), "DPUB"), (b"SUB t c\n", "SUB")])
async def test_commands_need_auth_first(nsqd, command, name):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.identify()
    await client.send(command if isinstance(command, bytes) else command.to_bytes())
    assert await client.read_error() == f"E_AUTH_FIRST AUTH required before {name}".encode()
    await client.assert_closed()
    assert "t" not in nsqd.topics


async def test_auth_answer_and_the_request_nsqd_makes(nsqd, auth_server):
    client, answer = await authed_client(nsqd, b"good")
    assert answer == {"identity": "alice", "identity_url": "https://auth.example/alice", "permission_count": 1}
    [request] = auth_server.requests
    assert request["method"] == "GET"
    assert request["path"] == "/auth?common_name=&remote_ip=127.0.0.1&secret=good&tls=false"
    assert request["headers"]["Accept"] == "application/vnd.nsq; version=1.0"
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_response() == b"OK"
    await client.sub("t", "c", rdy=1)
    assert (await client.read_message()).body == b"x"


async def test_stats_show_the_identity(nsqd):
    client, _ = await authed_client(nsqd, b"good")
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_response() == b"OK"
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json")).json()
    [producer] = stats["producers"]
    assert (producer["authed"], producer["auth_identity"], producer["auth_identity_url"]) == (
        True, "alice", "https://auth.example/alice")
    keys = list(producer)
    assert keys.index("user_agent") < keys.index("authed") < keys.index("pub_counts") < keys.index("tls")


@pytest.mark.parametrize("command, allowed", [
    (Pub("orders", b"x"), True), (Mpub("orders", [b"x", b"y"]), True), (Dpub("orders", 5, b"x"), True),
    (b"SUB orders billing\n", True),
    (Pub("orders2", b"x"), False),  # "^orders$" does not match
    (b"SUB orders shipping\n", False), (b"SUB invoices billing\n", False),
])
async def test_authorizations_decide_per_topic_channel_and_permission(nsqd, command, allowed):
    client, answer = await authed_client(nsqd, b"orders")
    assert answer["permission_count"] == 2
    await client.send(command if isinstance(command, bytes) else command.to_bytes())
    if allowed:
        assert await client.read_response() == b"OK"
        return
    name, topic, *channel = (command.decode().split() if isinstance(command, bytes)
                             else [type(command).__name__.upper(), command.topic])
    expected = f'E_UNAUTHORIZED AUTH failed for {name} on "{topic}" "{channel[0] if channel else ""}"'
    assert await client.read_error() == expected.encode()
    await client.assert_closed()


async def test_topic_patterns_are_unanchored(nsqd, auth_server):
    auth_server.answers["loose"] = (200, {"ttl": 60, "authorizations": [
        {"permissions": ["publish"], "topic": "ord", "channels": ["^$"]}]}, 0)
    client, _ = await authed_client(nsqd, b"loose")
    await client.send(Pub("my-orders", b"x").to_bytes())
    assert await client.read_response() == b"OK"


async def test_a_publish_grant_needs_a_channel_pattern_matching_the_empty_channel(nsqd, auth_server):
    auth_server.answers["strict"] = (200, {"ttl": 60, "authorizations": [
        {"permissions": ["publish"], "topic": ".*", "channels": [".+"]}]}, 0)
    client, _ = await authed_client(nsqd, b"strict")
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_error() == b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""'


async def test_auth_twice_is_refused(nsqd):
    client, _ = await authed_client(nsqd, b"good")
    await client.send(Auth(b"good").to_bytes())
    assert await client.read_error() == b"E_INVALID AUTH already set"
    await client.assert_closed()


async def test_an_answer_without_authorizations_is_unauthorized(nsqd, auth_server):
    auth_server.answers["nobody"] = (200, {"ttl": 60, "identity": "nobody", "authorizations": []}, 0)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Auth(b"nobody").to_bytes())
    assert await client.read_error() == b"E_UNAUTHORIZED AUTH no authorizations found"
    await client.assert_closed()


@pytest.mark.parametrize("status, answer", [
    (403, {"message": "NO"}), (500, {"message": "INTERNAL_ERROR"}), (200, b"not json"), (200, [1, 2]),
    (200, {"ttl": 0, "authorizations": EVERYTHING["authorizations"]}),
    (200, {"ttl": -5, "authorizations": EVERYTHING["authorizations"]}),
    (200, {"ttl": 1.5, "authorizations": EVERYTHING["authorizations"]}),
    (200, {"ttl": 60, "authorizations": [{"permissions": ["admin"], "topic": ".*", "channels": [".*"]}]}),
    (200, {"ttl": 60, "authorizations": [{"permissions": ["publish"], "topic": "(", "channels": [".*"]}]}),
    (200, {"ttl": 60, "authorizations": [{"permissions": ["publish"], "topic": ".*", "channels": ["["]}]}),
    (200, {"ttl": 60, "authorizations": [{"permissions": "publish", "topic": ".*", "channels": [".*"]}]}),
])
async def test_a_failing_or_invalid_auth_server_gives_auth_failed(nsqd, auth_server, status, answer):
    auth_server.answers["odd"] = (status, answer, 0)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Auth(b"odd").to_bytes())
    assert await client.read_error() == b"E_AUTH_FAILED AUTH failed"
    await client.assert_closed()


async def test_an_unreachable_auth_server_gives_auth_failed(start_nsqd, auth_server):
    dead = auth_server.address
    auth_server.close()
    nsqd = await start_nsqd(auth_http_address=[dead], http_client_connect_timeout=0.5)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Auth(b"good").to_bytes())
    assert await client.read_error() == b"E_AUTH_FAILED AUTH failed"


async def test_servers_are_tried_in_turn_until_one_answers(start_nsqd, auth_server):
    dead = AuthServer()
    dead.close()
    nsqd = await start_nsqd(auth_http_address=[dead.address, f"http://{auth_server.address}/auth"])
    for _ in range(4):  # whichever one is asked first
        _, answer = await authed_client(nsqd, b"good")
        assert answer["identity"] == "alice"


async def test_a_full_url_is_used_as_it_is(start_nsqd, auth_server):
    nsqd = await start_nsqd(auth_http_address=[f"http://{auth_server.address}/custom/path"])
    await authed_client(nsqd, b"good")
    assert auth_server.requests[0]["path"].startswith("/custom/path?common_name=")


async def test_post_sends_the_values_as_json(start_nsqd, auth_server):
    nsqd = await start_nsqd(auth_http_address=[auth_server.address], auth_http_request_method="post")
    await authed_client(nsqd, b"good")
    [request] = auth_server.requests
    assert (request["method"], request["path"]) == ("POST", "/auth")
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Accept"] == "application/vnd.nsq; version=1.0"
    assert json.loads(request["body"]) == {"common_name": [""], "remote_ip": ["127.0.0.1"], "secret": ["good"],
                                           "tls": ["false"]}


async def test_the_answer_is_asked_again_after_its_ttl(nsqd, auth_server):
    auth_server.answers["short"] = (200, dict(EVERYTHING, ttl=1), 0)
    client, _ = await authed_client(nsqd, b"short")
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_response() == b"OK"
    assert len(auth_server.requests) == 1  # cached
    await trio.sleep(1.1)  # deliberate: past the answer's 1 s TTL
    auth_server.answers["short"] = (200, dict(ORDERS_ONLY, ttl=1), 0)
    await client.send(Pub("orders", b"x").to_bytes())
    assert await client.read_response() == b"OK"
    assert len(auth_server.requests) == 2
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_error() == b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""'


async def test_a_failed_refresh_gives_auth_failed_never_access(nsqd, auth_server):
    auth_server.answers["short"] = (200, dict(EVERYTHING, ttl=1), 0)
    client, _ = await authed_client(nsqd, b"short")
    await trio.sleep(1.1)  # deliberate: past the answer's 1 s TTL
    auth_server.answers["short"] = (500, {"message": "down"}, 0)
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_error() == b"E_AUTH_FAILED AUTH failed"
    await client.assert_closed()
    assert "t" not in nsqd.topics


async def test_a_slow_auth_server_does_not_hold_up_other_clients(nsqd, auth_server):
    auth_server.answers["slow"] = (200, EVERYTHING, 2.0)  # twice the bound below: a loaded machine's margin
    slow = await RawClient.connect(nsqd.tcp_port)
    started = trio.current_time()
    await slow.send(Auth(b"slow").to_bytes() + Pub("t", b"after auth").to_bytes())
    fast, _ = await authed_client(nsqd, b"good")
    await fast.send(Pub("t", b"fast").to_bytes())
    assert await fast.read_response() == b"OK"
    assert trio.current_time() - started < 1.0
    assert json.loads(await slow.read_response())["identity"] == "alice"
    assert await slow.read_response() == b"OK"  # the PUB sent behind AUTH waited for it


async def test_tls_state_and_common_name_go_to_the_auth_server(start_nsqd, auth_server, certs):
    nsqd = await start_nsqd(auth_http_address=[auth_server.address], tls_client_auth_policy="require-verify",
                            tls_root_ca_file=certs.ca_file, **certs.nsqd_options())
    client, _ = await connect(nsqd.tcp_port, certs.client_context(certs.ca.issue_cert("consumer.example", common_name="consumer-7")), tls_v1=True)
    await client.send(Auth(b"good").to_bytes())
    assert json.loads(await client.read_response())["identity"] == "alice"
    values = auth_server.requests[0]["values"]
    assert (values["tls"], values["common_name"], values["remote_ip"]) == (["true"], ["consumer-7"], ["127.0.0.1"])


async def test_auth_disabled(start_nsqd):
    nsqd = await start_nsqd()
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Auth(b"x").to_bytes())
    assert await client.read_error() == b"E_AUTH_DISABLED AUTH disabled"


def test_answer_fields_are_read_as_go_reads_them():
    state = parse_auth_state(b'{"ttl": 5, "identity": null, "authorizations": null, "extra": 1}')
    assert (state.identity, state.identity_url, state.authorizations) == ("", "", ())
    with pytest.raises(AuthError, match="must be >0"):
        parse_auth_state(b"{}")
    with pytest.raises(AuthError):
        parse_auth_state(b'{"ttl": true}')
