"""nsqlookupd against NSQ's own, side by side (tests/differential_driver.py): V1 sessions of peers
(IDENTIFY, REGISTER, UNREGISTER, PING, bad ones) and every HTTP route, every reply equal after
normalising, and the registrations (/debug, /nodes, /topics) equal after every step."""

import json
import struct

import pytest

from .differential_lookupd_driver import lookupd_pair  # noqa: F401 (a fixture the tests use)
from .go_nsq import requires_go

pytestmark = requires_go


@pytest.fixture
def pair(lookupd_pair):
    yield lookupd_pair
    lookupd_pair.end_test()


def identify(**overrides) -> bytes:
    info = {"broadcast_address": "nsqd.example", "hostname": "h1", "tcp_port": 4150, "http_port": 4151,
            "version": "1.3.0", **overrides}
    body = json.dumps(info).encode()
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


def session(pair, *lines: bytes, name: str = "p1") -> None:
    pair.connect(name)
    for line in lines:
        pair.send(name, line)


# -- V1 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [b"  V2", b"XXXX", b"  v1"])
def test_a_bad_magic(pair, magic):
    pair.connect("p1", magic=magic)


IDENTIFIES = {
    "good": identify(),
    "missing broadcast_address": identify(broadcast_address=""),
    "missing tcp_port": identify(tcp_port=0),
    "missing version": identify(version=""),
    "extra keys": identify(extra=1, remote_address="1.2.3.4:5"),
    "wrong type": identify(tcp_port="4150"),
    "not JSON": b"IDENTIFY\n" + struct.pack(">i", 5) + b"{nope",
    "empty body": b"IDENTIFY\n" + struct.pack(">i", 0),
    "html and unicode": identify(hostname="<h&\u00e9>", broadcast_address="b\u2028"),
    "case-insensitive keys": b'IDENTIFY\n' + struct.pack(">i", 77)
    + b'{"BROADCAST_ADDRESS":"x","Tcp_Port":1,"http_port":2,"version":"v","hostname":"yy"}',
}


@pytest.mark.parametrize("line", IDENTIFIES.values(), ids=IDENTIFIES.keys())
def test_identify(pair, line):
    session(pair, line, b"PING\n")


COMMANDS = [b"PING\n", b"PING extra\n", b"ping\n", b"BOGUS\n", b"\n", b" PING \n", b"\tPING\n", b"REGISTER t1\n",
            b"UNREGISTER t1\n", b"REGISTER\n", b"REGISTER t1 c1\n", b"REGISTER bad!topic\n", b"REGISTER t1 bad!ch\n",
            b"REGISTER t1  c1\n", b"REGISTER t1 c1 extra\n", b"REGISTER " + b"t" * 65 + b"\n",
            b"REGISTER t1#ephemeral c#ephemeral\n", b"UNREGISTER t1 c1\n", b"UNREGISTER nope\n", b"UNREGISTER nope c\n",
            b"UNREGISTER\n", b"REGISTER t1\r\n", identify()]


@pytest.mark.parametrize("line", COMMANDS)
def test_commands_before_and_after_identify(pair, line):
    session(pair, line, name="before")
    session(pair, identify(), line, b"PING\n", name="after")


def test_registrations_and_their_removal(pair):
    session(pair, identify(), b"REGISTER t1\n", b"REGISTER t1 c1\n", b"REGISTER t1 c2\n", b"REGISTER t2 c1\n",
            name="p1")
    session(pair, identify(broadcast_address="other", tcp_port=5150, http_port=5151), b"REGISTER t1 c1\n",
            b"REGISTER t3\n", name="p2")
    for path in ("/lookup?topic=t1", "/lookup?topic=t2", "/channels?topic=t1", "/topics", "/nodes"):
        pair.http("GET", path)
    pair.send("p1", b"UNREGISTER t1 c1\n")
    pair.send("p1", b"UNREGISTER t1\n")
    pair.send("p2", b"UNREGISTER t3\n")
    pair.hang_up("p2")
    pair.http("GET", "/lookup?topic=t1")


def test_a_negative_identify_size(pair):
    """Deliberate difference (README): NSQ's nsqlookupd panics; ours refuses the peer."""
    pair.connect("p1", check=False)
    go, ours = pair.apart("p1", b"IDENTIFY\n" + struct.pack(">i", -1))
    assert go == ["CLOSED"] and pair.go.process.proc.wait(timeout=10) != 0
    assert ours == ["E_BAD_BODY IDENTIFY invalid body size -1", "CLOSED"]


def test_a_partial_identify_when_the_peer_leaves(pair):
    body = identify()
    for cut in (5, 9, 11, 20, len(body) - 1):
        pair.connect("p1")
        pair.send("p1", body[:cut], replies=0, check=False)
        pair.hang_up("p1")


# -- HTTP -------------------------------------------------------------------------------------

ROUTES = ["/ping", "/info", "/debug", "/lookup", "/topics", "/channels", "/nodes", "/topic/create", "/topic/delete",
          "/channel/create", "/channel/delete", "/topic/tombstone", "/config/log_level"]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("path", ROUTES)
def test_every_route_with_every_method(pair, path, method):
    pair.http(method, path)


@pytest.mark.parametrize("path", ["/", "/nope", "/ping/", "/PING", "/Lookup?topic=x", "/topic", "/topic/",
                                  "/topics/", "/debug/", "/x/../ping"])
def test_unknown_and_near_paths(pair, path):
    for method in ("GET", "POST", "OPTIONS"):
        pair.http(method, path)


@pytest.mark.parametrize("path", [
    "/lookup", "/lookup?topic=", "/lookup?topic=absent", "/lookup?topic=b@d", "/channels", "/channels?topic=absent",
    "/channels?topic=", "/topic/create", "/topic/create?topic=", "/topic/create?topic=b@d", "/topic/create?topic=h1",
    "/topic/create?topic=h1%23ephemeral", "/topic/delete", "/topic/delete?topic=absent", "/topic/delete?topic=h1",
    "/channel/create", "/channel/create?topic=h1", "/channel/create?topic=h1&channel=b@d",
    "/channel/create?topic=b@d&channel=c", "/channel/create?topic=h1&channel=c1", "/channel/delete?topic=h1",
    "/channel/delete?topic=h1&channel=absent", "/channel/delete?topic=h1&channel=c1", "/topic/tombstone",
    "/topic/tombstone?topic=t1", "/topic/tombstone?topic=t1&node=nope", "/topic/tombstone?topic=t1&node=nsqd.example:4151",
    "/lookup?topic=%zz", "/topics?x=1;y", "/info?x"])
def test_routes_with_arguments(pair, path):
    session(pair, identify(), b"REGISTER t1\n", b"REGISTER t1 c1\n")
    method = "GET" if path.startswith(("/lookup", "/channels", "/topics", "/info")) else "POST"
    pair.http(method, path)
    pair.http("GET", "/lookup?topic=t1")


def test_tombstones_in_nodes_and_lookup(pair):
    session(pair, identify(), b"REGISTER t1\n", b"REGISTER t2\n", name="p1")
    session(pair, identify(broadcast_address="other", http_port=5151), b"REGISTER t1\n", name="p2")
    pair.http("POST", "/topic/tombstone?topic=t1&node=nsqd.example:4151")
    for path in ("/nodes", "/lookup?topic=t1", "/lookup?topic=t2", "/debug"):
        pair.http("GET", path)
    pair.send("p1", b"REGISTER t1\n")
    pair.http("GET", "/lookup?topic=t1")


@pytest.mark.parametrize("option", ["log_level", "tcp_address", "broadcast_address", "inactive_producer_timeout",
                                    "tombstone_lifetime", "verbose", "nope"])
def test_config(pair, option):
    pair.http("GET", f"/config/{option}")
    pair.http("PUT", f"/config/{option}", b"debug")
