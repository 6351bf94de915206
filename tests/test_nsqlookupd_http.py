"""nsqlookupd's HTTP API with httpx: every route, its JSON and its errors (NSQ v1.3's nsqlookupd/http.go)."""

import json

import pytest

from common import VERSION
from nsqlookupd.registration_db import GO_ZERO_TIME_UNIX_NANO

from .lookupd_helpers import SECOND, Peer, clock, http, lookupd, start_lookupd, wait_until  # noqa: F401

V1 = "nsq; version=1.0"
JSON = "application/json; charset=utf-8"


def assert_v1_json(response, status: int, body) -> None:
    assert response.status_code == status, response.text
    assert response.headers["x-nsq-content-type"] == V1
    assert response.headers["content-type"] == JSON
    assert response.json() == body


def assert_v1_empty(response) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["x-nsq-content-type"] == V1
    assert response.content == b""


async def peer_with(lookupd, n: int, registrations: list[tuple[str, str]]) -> Peer:
    """An identified peer with registrations. Keep a reference: a dropped Peer is closed."""
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.identify(n)
    for topic, channel in registrations:
        await peer.register(topic, channel)
    return peer


async def test_ping_is_plain_text(http):
    response = await http.get("/ping")
    assert (response.status_code, response.text) == (200, "OK")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert "x-nsq-content-type" not in response.headers


async def test_info(http):
    response = await http.get("/info")
    assert_v1_json(response, 200, {"version": VERSION})
    assert response.content == b'{"version":"1.3.0"}'


async def test_topics_and_channels(lookupd, http):
    assert_v1_json(await http.get("/topics"), 200, {"topics": []})
    peer = await peer_with(lookupd, 1, [("a", "c1"), ("a", "c2"), ("b", "")])
    assert_v1_empty(await http.post("/topic/create?topic=made"))
    assert_v1_json(await http.get("/topics"), 200, {"topics": ["a", "b", "made"]})
    assert_v1_json(await http.get("/channels?topic=a"), 200, {"channels": ["c1", "c2"]})
    assert_v1_json(await http.get("/channels?topic=b"), 200, {"channels": []})
    assert_v1_json(await http.get("/channels?topic=unknown"), 200, {"channels": []})
    assert_v1_json(await http.get("/channels?topic="), 200, {"channels": []})
    assert_v1_json(await http.get("/channels?topic=*"), 200, {"channels": ["c1", "c2"]})  # NSQ's wildcard
    assert_v1_json(await http.get("/channels"), 400, {"message": "MISSING_ARG_TOPIC"})
    assert_v1_json(await http.get("/channels?topic=a;b"), 400, {"message": "INVALID_REQUEST"})
    assert_v1_json(await http.get("/channels?topic=%zz"), 400, {"message": "INVALID_REQUEST"})


async def test_lookup(lookupd, http):
    assert_v1_json(await http.get("/lookup?topic=t"), 404, {"message": "TOPIC_NOT_FOUND"})
    assert_v1_json(await http.get("/lookup"), 400, {"message": "MISSING_ARG_TOPIC"})
    assert_v1_json(await http.get("/lookup?topic=t&x=%"), 400, {"message": "INVALID_REQUEST"})
    one = await peer_with(lookupd, 1, [("t", "c1"), ("t", "c2")])
    two = await peer_with(lookupd, 2, [("t", "")])
    response = await http.get("/lookup", params={"topic": "t"})
    # NSQ's key order: a Go map (sorted keys) of PeerInfo structs (declaration order).
    assert response.content == (
        b'{"channels":["c1","c2"],"producers":['
        b'{"remote_address":"%s","hostname":"host1","broadcast_address":"nsqd1","tcp_port":4160,"http_port":4161,'
        b'"version":"1.3.0"},'
        b'{"remote_address":"%s","hostname":"host2","broadcast_address":"nsqd2","tcp_port":4170,"http_port":4171,'
        b'"version":"1.3.0"}]}' % (one.address.encode(), two.address.encode()))
    assert_v1_json(await http.get("/lookup?topic=*"), 200, json.loads(response.content))  # NSQ's wildcard
    assert_v1_empty(await http.post("/topic/create?topic=empty"))
    assert_v1_json(await http.get("/lookup?topic=empty"), 200, {"channels": [], "producers": []})


async def test_lookup_hides_inactive_producers(lookupd, http, clock):
    one = await peer_with(lookupd, 1, [("t", "")])
    two = await peer_with(lookupd, 2, [("t", "")])
    clock.advance(299)
    await one.ping()
    clock.advance(2)  # peer 2 last seen 301 s ago, past --inactive-producer-timeout=300s
    producers = (await http.get("/lookup?topic=t")).json()["producers"]
    assert [p["broadcast_address"] for p in producers] == ["nsqd1"]
    assert [n["broadcast_address"] for n in (await http.get("/nodes")).json()["producers"]] == ["nsqd1"]


async def test_tombstone_hides_a_producer_for_the_tombstone_lifetime(lookupd, http, clock):
    peers = [await peer_with(lookupd, 1, [("t", "c"), ("u", "")]), await peer_with(lookupd, 2, [("t", "")])]
    assert_v1_empty(await http.post("/topic/tombstone?topic=t&node=nsqd1:4161"))
    assert [p["broadcast_address"] for p in (await http.get("/lookup?topic=t")).json()["producers"]] == ["nsqd2"]
    assert [p["broadcast_address"] for p in (await http.get("/lookup?topic=u")).json()["producers"]] == ["nsqd1"]
    nodes = (await http.get("/nodes")).json()["producers"]
    assert [(n["broadcast_address"], n["topics"], n["tombstones"]) for n in nodes] == [
        ("nsqd1", ["t", "u"], [True, False]), ("nsqd2", ["t"], [False])]
    clock.advance(45)
    for peer in lookupd.db.find_producers("client", "", ""):
        peer.peer_info.last_update = clock()
    assert len((await http.get("/lookup?topic=t")).json()["producers"]) == 2
    assert (await http.get("/nodes")).json()["producers"][0]["tombstones"] == [False, False]
    # A node that matches nothing, an unknown topic: still 200, nothing changes.
    assert_v1_empty(await http.post("/topic/tombstone?topic=t&node=nsqd1:4150"))
    assert_v1_empty(await http.post("/topic/tombstone?topic=nope&node=nsqd1:4161"))
    assert len((await http.get("/lookup?topic=t")).json()["producers"]) == 2


async def test_tombstone_errors(http):
    assert_v1_json(await http.post("/topic/tombstone?node=n:1"), 400, {"message": "MISSING_ARG_TOPIC"})
    assert_v1_json(await http.post("/topic/tombstone?topic=t"), 400, {"message": "MISSING_ARG_NODE"})
    assert_v1_json(await http.post("/topic/tombstone?topic=t;"), 400, {"message": "INVALID_REQUEST"})


async def test_nodes(lookupd, http):
    assert_v1_json(await http.get("/nodes"), 200, {"producers": []})
    one = await peer_with(lookupd, 1, [("t", "c"), ("u", "")])
    anonymous = await Peer.connect(lookupd.tcp_port)  # not identified: not a node
    response = await http.get("/nodes")
    assert response.content == (
        b'{"producers":[{"remote_address":"%s","hostname":"host1","broadcast_address":"nsqd1","tcp_port":4160,'
        b'"http_port":4161,"version":"1.3.0","tombstones":[false,false],"topics":["t","u"]}]}' % one.address.encode())
    await one.close()
    await wait_until(lambda: len(lookupd.connections) == 1)
    assert_v1_json(await http.get("/nodes"), 200, {"producers": []})


async def test_debug(lookupd, http, clock):
    one = await peer_with(lookupd, 1, [("t", "c")])
    assert_v1_empty(await http.post("/topic/create?topic=empty"))  # no producers: not listed
    clock.advance(1)
    assert_v1_empty(await http.post("/topic/tombstone?topic=t&node=nsqd1:4161"))
    entry = {"broadcast_address": "nsqd1", "hostname": "host1", "http_port": 4161, "id": one.address,
             "last_update": clock() - SECOND, "tcp_port": 4160, "tombstoned": False,
             "tombstoned_at": GO_ZERO_TIME_UNIX_NANO, "version": "1.3.0"}
    response = await http.get("/debug")
    assert_v1_json(response, 200, {
        "channel:t:c": [entry],
        "client::": [entry],
        "topic:t:": [{**entry, "tombstoned": True, "tombstoned_at": clock()}],
    })
    # Go marshals maps: every level's keys sorted.
    assert response.content.startswith(b'{"channel:t:c":[{"broadcast_address":"nsqd1","hostname":"host1",'
                                       b'"http_port":4161,"id":')


async def test_topic_create_and_delete(lookupd, http):
    assert_v1_json(await http.post("/topic/create"), 400, {"message": "MISSING_ARG_TOPIC"})
    assert_v1_json(await http.post("/topic/create?topic=bad!"), 400, {"message": "INVALID_ARG_TOPIC"})
    assert_v1_json(await http.post("/topic/create?topic=" + "x" * 65), 400, {"message": "INVALID_ARG_TOPIC"})
    assert_v1_json(await http.post("/topic/create?topic=a&b=%"), 400, {"message": "INVALID_REQUEST"})
    assert_v1_empty(await http.post("/topic/create?topic=a"))
    assert_v1_empty(await http.post("/topic/create?topic=a"))
    peer = await peer_with(lookupd, 1, [("a", "c1"), ("a", "c2"), ("b", "c1")])
    assert_v1_empty(await http.post("/topic/delete?topic=a"))
    assert (await http.get("/topics")).json() == {"topics": ["b"]}
    assert (await http.get("/channels?topic=a")).json() == {"channels": []}
    assert (await http.get("/lookup?topic=a")).status_code == 404
    assert (await http.get("/channels?topic=b")).json() == {"channels": ["c1"]}
    assert_v1_empty(await http.post("/topic/delete?topic=never-existed"))  # never 404
    assert_v1_empty(await http.post("/topic/delete?topic=bad!"))  # not validated
    assert_v1_json(await http.post("/topic/delete"), 400, {"message": "MISSING_ARG_TOPIC"})


async def test_channel_create_and_delete(lookupd, http):
    assert_v1_empty(await http.post("/channel/create?topic=t&channel=c"))
    assert (await http.get("/topics")).json() == {"topics": ["t"]}
    assert (await http.get("/lookup?topic=t")).json() == {"channels": ["c"], "producers": []}
    assert_v1_empty(await http.post("/channel/delete?topic=t&channel=c"))
    assert (await http.get("/channels?topic=t")).json() == {"channels": []}
    assert_v1_json(await http.post("/channel/delete?topic=t&channel=c"), 404, {"message": "CHANNEL_NOT_FOUND"})
    assert_v1_json(await http.post("/channel/delete?topic=nope&channel=c"), 404, {"message": "CHANNEL_NOT_FOUND"})
    peer = await peer_with(lookupd, 1, [("t", "live")])
    assert_v1_empty(await http.post("/channel/delete?topic=t&channel=live"))  # producers go with it
    assert lookupd.db.find_producers("channel", "t", "live") == []


@pytest.mark.parametrize("path", ["/channel/create", "/channel/delete"])
@pytest.mark.parametrize("query, error", [
    ("", "MISSING_ARG_TOPIC"),
    ("channel=c", "MISSING_ARG_TOPIC"),
    ("topic=bad!&channel=c", "INVALID_ARG_TOPIC"),
    ("topic=t", "MISSING_ARG_CHANNEL"),
    ("topic=t&channel=", "INVALID_ARG_CHANNEL"),
    ("topic=t&channel=bad*", "INVALID_ARG_CHANNEL"),
    ("topic=t;channel=c", "INVALID_REQUEST"),
])
async def test_channel_argument_errors(http, path, query, error):
    assert_v1_json(await http.post(f"{path}?{query}"), 400, {"message": error})


async def test_routing_errors_are_v1(http):
    assert_v1_json(await http.get("/nope"), 404, {"message": "NOT_FOUND"})
    assert_v1_json(await http.get("/debug/pprof"), 404, {"message": "NOT_FOUND"})
    response = await http.get("/ping/?x=1")  # httprouter's redirects (serving/httprouter.py)
    assert (response.status_code, response.headers["location"]) == (301, "/ping?x=1")
    response = await http.post("/Topic/Create?topic=t")
    assert (response.status_code, response.headers["location"], response.content) == (307, "/topic/create?topic=t", b"")
    response = await http.post("/lookup?topic=t")
    assert_v1_json(response, 405, {"message": "METHOD_NOT_ALLOWED"})
    assert response.headers["allow"] == "GET, OPTIONS"
    response = await http.get("/topic/create?topic=t")
    assert_v1_json(response, 405, {"message": "METHOD_NOT_ALLOWED"})
    assert response.headers["allow"] == "OPTIONS, POST"  # sorted, as NSQ's httprouter does
    assert (await http.get("/topics")).json() == {"topics": []}  # nothing was created
    # httprouter has no implicit HEAD; OPTIONS lists the methods.
    response = await http.head("/ping")
    assert (response.status_code, response.content) == (405, b"")
    response = await http.options("/lookup")
    assert (response.status_code, response.headers["allow"], response.content) == (200, "GET, OPTIONS", b"")
    assert (await http.request("PUT", "/ping")).status_code == 405


async def test_request_bodies_are_ignored(http):
    assert_v1_empty(await http.post("/topic/create?topic=t", content=b"topic=other"))
    assert (await http.get("/topics")).json() == {"topics": ["t"]}


async def test_keep_alive_serves_many_requests_on_one_connection(lookupd, http):
    peer = await peer_with(lookupd, 1, [("t", "c")])
    for _ in range(50):
        response = await http.get("/lookup?topic=t")
        assert response.json()["producers"][0]["remote_address"] == peer.address
