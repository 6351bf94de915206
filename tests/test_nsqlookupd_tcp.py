"""nsqlookupd's TCP protocol V1 over real sockets: every command and error
(NSQ v1.3's nsqlookupd/lookup_protocol_v1.go)."""

import json
import socket
import struct

import pytest
import trio

from common import VERSION
from common.protocol_v1 import MAGIC_V1, Identify
from nsqlookupd.registration_db import CLIENT, keys, subkeys, topic_registration

from .lookupd_helpers import SECOND, Peer, clock, http, lookupd, peer_info, start_lookupd, wait_until  # noqa: F401


def producers(lookupd, topic: str, channel: str = "") -> list[str]:
    category = "channel" if channel else "topic"
    return [p.peer_info.broadcast_address for p in lookupd.db.find_producers(category, topic, channel)]


async def test_identify_reply_describes_the_lookupd(lookupd):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.send(Identify(peer_info(1)).to_bytes())
    reply = await peer.read()
    # A Go map marshalled: keys sorted; the real ports; the configured broadcast address.
    assert reply == (b'{"broadcast_address":"lookupd.test","hostname":"%s","http_port":%d,"tcp_port":%d,"version":"%s"}'
                     % (socket.gethostname().encode(), lookupd.http_port, lookupd.tcp_port, VERSION.encode()))
    info = lookupd.db.find_producers("client", "", "")[0].peer_info
    assert (info.id, info.remote_address, info.broadcast_address, info.hostname, info.tcp_port, info.http_port,
            info.version) == (peer.address, peer.address, "nsqd1", "host1", 4160, 4161, "1.3.0")


async def test_ping_before_and_after_identify_updates_last_update(lookupd, clock):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.ping()  # allowed before IDENTIFY, changes nothing
    await peer.identify()
    info = lookupd.db.find_producers("client", "", "")[0].peer_info
    assert info.last_update == clock()
    clock.advance(15)
    await peer.ping()
    assert info.last_update == clock()


async def test_register_and_unregister(lookupd):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.identify()
    await peer.register("orders", "billing")
    await peer.register("orders", "shipping")
    await peer.register("audit")
    assert keys(lookupd.db.find_registrations("topic", "*", "")) == ["orders", "audit"]
    assert subkeys(lookupd.db.find_registrations("channel", "orders", "*")) == ["billing", "shipping"]
    assert producers(lookupd, "orders", "billing") == ["nsqd1"]
    await peer.unregister("orders", "billing")
    assert producers(lookupd, "orders", "billing") == []
    assert producers(lookupd, "orders") == ["nsqd1"]
    await peer.unregister("orders")  # also leaves the remaining channel
    assert producers(lookupd, "orders") == [] and producers(lookupd, "orders", "shipping") == []
    assert keys(lookupd.db.find_registrations("topic", "*", "")) == ["orders", "audit"]  # keys stay


async def test_ephemeral_registrations_vanish_with_their_last_producer(lookupd):
    one, two = await Peer.connect(lookupd.tcp_port), await Peer.connect(lookupd.tcp_port)
    await one.identify(1)
    await two.identify(2)
    await one.register("t#ephemeral", "c#ephemeral")
    await two.register("t#ephemeral", "c#ephemeral")
    await one.unregister("t#ephemeral", "c#ephemeral")
    assert subkeys(lookupd.db.find_registrations("channel", "t#ephemeral", "*")) == ["c#ephemeral"]
    await two.unregister("t#ephemeral", "c#ephemeral")
    assert lookupd.db.find_registrations("channel", "t#ephemeral", "*") == []
    await one.unregister("t#ephemeral")
    assert keys(lookupd.db.find_registrations("topic", "*", "")) == ["t#ephemeral"]
    await two.unregister("t#ephemeral")
    assert lookupd.db.find_registrations("topic", "*", "") == []


async def test_commands_in_one_write_get_replies_in_order(lookupd):
    peer = await Peer.connect(lookupd.tcp_port, magic=False)
    await peer.send(MAGIC_V1 + Identify(peer_info()).to_bytes() + b"REGISTER a b\nPING\nUNREGISTER a b\nREGISTER c\n")
    assert json.loads(await peer.read())["version"] == VERSION
    assert [await peer.read() for _ in range(4)] == [b"OK"] * 4
    assert producers(lookupd, "c") == ["nsqd1"]


async def test_disconnect_removes_every_registration_of_that_peer_only(lookupd):
    one, two = await Peer.connect(lookupd.tcp_port), await Peer.connect(lookupd.tcp_port)
    await one.identify(1)
    await two.identify(2)
    for peer in (one, two):
        await peer.register("t", "c")
        await peer.register("t", "c2")
    await one.close()
    await wait_until(lambda: len(lookupd.connections) == 1)
    assert lookupd.db.lookup_registrations(one.address) == []
    assert producers(lookupd, "t") == ["nsqd2"]
    assert producers(lookupd, "t", "c") == ["nsqd2"]
    assert [p.peer_info.broadcast_address for p in lookupd.db.find_producers("client", "", "")] == ["nsqd2"]
    await two.ping()
    assert len(lookupd.db.lookup_registrations(two.address)) == 4  # client, 2 channels, topic
    await two.close()
    await wait_until(lambda: not lookupd.connections)
    # The keys stay, with no producers (as NSQ).
    assert lookupd.db.find_registrations("topic", "t", "") == [topic_registration("t")]
    assert lookupd.db.find_producers("topic", "*", "") == []
    assert CLIENT in [k for k, _ in lookupd.db.items()]


BEFORE_IDENTIFY = [
    (b"  V2", b"E_BAD_PROTOCOL"),
    (MAGIC_V1 + b"NOPE\n", b"E_INVALID invalid command NOPE"),
    (MAGIC_V1 + b"\n", b"E_INVALID invalid command "),
    (MAGIC_V1 + b"REGISTER t c\n", b"E_INVALID client must IDENTIFY"),
    (MAGIC_V1 + b"UNREGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (MAGIC_V1 + b"IDENTIFY\n\x00\x00\x00\x02{}", b"E_BAD_BODY IDENTIFY missing fields"),
    (MAGIC_V1 + b"IDENTIFY\n\x00\x00\x00\x01{", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (MAGIC_V1 + b"IDENTIFY\n\xff\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size -1"),
    (MAGIC_V1 + b"IDENTIFY\n\x7f\xff\xff\xff", b"E_BAD_BODY IDENTIFY body too big 2147483647 > 1048576"),
    (MAGIC_V1 + b"R" * 20000, b"E_INVALID command line longer than 16384 bytes"),
]
AFTER_IDENTIFY = [
    (b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),
    (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
    (b"REGISTER t*\n", b"E_BAD_TOPIC REGISTER topic name 't*' is not valid"),
    (b"UNREGISTER t*\n", b"E_BAD_TOPIC UNREGISTER topic name 't*' is not valid"),
    (b"REGISTER t c*\n", b"E_BAD_CHANNEL REGISTER channel name 'c*' is not valid"),
    (b"UNREGISTER t c*\n", b"E_BAD_CHANNEL UNREGISTER channel name 'c*' is not valid"),
    (b"PUB t\n", b"E_INVALID invalid command PUB"),
]


@pytest.mark.parametrize("wire, error", BEFORE_IDENTIFY)
async def test_errors_before_identify_are_fatal(lookupd, wire, error):
    peer = await Peer.connect(lookupd.tcp_port, magic=False)
    await peer.send(wire)
    assert await peer.read() == error
    await peer.assert_closed()
    await wait_until(lambda: not lookupd.connections)
    assert lookupd.db.find_producers("client", "", "") == []


@pytest.mark.parametrize("wire, error", AFTER_IDENTIFY)
async def test_errors_after_identify_are_fatal_and_unregister_the_peer(lookupd, wire, error):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.identify()
    await peer.register("kept", "until-error")
    await peer.send(wire)
    assert await peer.read() == error
    await peer.assert_closed()
    await wait_until(lambda: not lookupd.connections)
    assert producers(lookupd, "kept") == [] and producers(lookupd, "kept", "until-error") == []


async def test_stream_ending_inside_identify_gets_a_reply(lookupd):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.send(b"IDENTIFY\n\x00\x00\x00\x10{")
    await peer.stream.send_eof()
    assert await peer.read() == b"E_BAD_BODY IDENTIFY failed to read body"
    await peer.assert_closed()


async def test_misbehaving_peers_do_not_disturb_others(lookupd):
    good = await Peer.connect(lookupd.tcp_port)
    await good.identify(1)
    await good.register("t", "c")
    # A reset mid-command, a half-sent IDENTIFY, raw garbage, a peer that never reads.
    reset = socket.create_connection(("127.0.0.1", lookupd.tcp_port))
    reset.sendall(MAGIC_V1 + b"IDENTIFY\n\x00\x00")
    reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reset.close()
    half = await Peer.connect(lookupd.tcp_port)
    await half.send(b"IDENTIFY\n\x00\x00\x01\x00{")
    garbage = await Peer.connect(lookupd.tcp_port, magic=False)
    await garbage.send(bytes(range(256)) * 10)
    deaf = socket.create_connection(("127.0.0.1", lookupd.tcp_port))
    deaf.setblocking(False)
    pings = MAGIC_V1 + b"PING\n" * 1_000_000
    with trio.fail_after(5):
        while pings:  # until its replies fill every buffer and nsqlookupd stops reading from it
            try:
                pings = pings[deaf.send(pings):]
            except BlockingIOError:
                break
            await trio.sleep(0.01)  # deliberate: lookupd reads (and answers) meanwhile
    await garbage.assert_closed()
    await good.ping()
    await good.register("t", "c2")
    other = await Peer.connect(lookupd.tcp_port)
    await other.identify(2)
    await other.register("t")
    assert producers(lookupd, "t") == ["nsqd1", "nsqd2"]
    await half.close()
    deaf.close()
    await wait_until(lambda: len(lookupd.connections) == 2)


async def test_registrations_show_in_the_http_api(lookupd, http):
    peer = await Peer.connect(lookupd.tcp_port)
    await peer.identify(1)
    await peer.register("orders", "billing")
    response = await http.get("/lookup", params={"topic": "orders"})
    assert response.json() == {"channels": ["billing"], "producers": [{
        "remote_address": peer.address, "hostname": "host1", "broadcast_address": "nsqd1",
        "tcp_port": 4160, "http_port": 4161, "version": "1.3.0"}]}
    await peer.close()
    await wait_until(lambda: not lookupd.connections)
    assert (await http.get("/lookup", params={"topic": "orders"})).json() == {"channels": ["billing"], "producers": []}
