"""Draining a node (nsqd/drain.py), with real processes: our nsqd draining to NSQ's own tools
(Go's nsq_tail and to_nsq) and pynsq, seen by Go's nsqlookupd and ours; messages in memory, on
disk, in flight and deferred when the drain starts; bad input answered as nsqd answers it.

Every drain ends its nsqd, so each test starts its own."""

import json
import signal
import socket
import struct
import subprocess
import sys
import urllib.error

import pytest

from common.commands import Dpub, Mpub

from .go_nsq import GoAdminProcess, GoLookupdProcess, GoNsqdProcess, go_program, requires_go
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import Utility, http, wait_until


def status_of(port: int, path: str, body: bytes | None = None, method: str | None = None) -> tuple[int, bytes]:
    try:
        return 200, http(port, path, body, method)
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def stats(nsqd) -> dict:
    return json.loads(http(nsqd.http_port, "/stats?format=json"))


def start_drain(nsqd) -> None:
    assert status_of(nsqd.http_port, "/config/drain", b"true", "PUT") == (200, b"true")


class V2:
    """A bare V2 connection, to hold a message in flight or see an error frame."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"  V2")

    def frame(self) -> tuple[int, bytes]:
        size, kind = struct.unpack(">ii", self._read(8))
        return kind, self._read(size - 4)

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def command(self, line: bytes) -> tuple[int, bytes]:
        self.sock.sendall(line)
        return self.frame()

    def close(self) -> None:
        self.sock.close()


@requires_go
def test_a_drain_delivers_memory_disk_in_flight_and_deferred_then_nsqd_exits_0(tmp_path):
    """SIGTERM with --sigterm=drain: nothing new is taken (to_nsq's PUB gets E_PUB_FAILED, HTTP
    503), every message held is delivered to Go's nsq_tail, and nsqd exits 0 by itself."""
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--sigterm=drain", "--mem-queue-size=3")
    try:
        port = nsqd.http_port
        http(port, "/topic/create?topic=t", b"")
        http(port, "/channel/create?topic=t&channel=c", b"")
        http(port, "/mpub?topic=t", b"\n".join(b"m%d" % n for n in range(10)))  # 3 in memory, 7 on disk
        http(port, "/pub?topic=t&defer=1500", b"deferred")
        holder = V2(nsqd.tcp_port)
        assert holder.command(b"SUB t c\n") == (0, b"OK")
        holder.sock.sendall(b"RDY 1\n")
        kind, held = holder.frame()
        assert kind == 2 and held[26:] == b"m0"  # in flight on the holder
        wait_until(lambda: stats(nsqd)["topics"][0]["channels"][0]["in_flight_count"] == 1, what="in flight")

        nsqd.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: json.loads(http(port, "/info")).get("draining"), what="/info draining")
        document = stats(nsqd)
        assert document["draining"] is True and document["drain_messages_left"] == 11
        assert "Draining: 11 messages left" in http(port, "/stats").decode()
        assert "nsq_drain_messages_left 11" in http(port, "/metrics").decode()
        assert status_of(port, "/pub?topic=t", b"late") == (503, b'{"message":"DRAINING"}')
        assert status_of(port, "/topic/create?topic=new", b"")[0] == 503
        assert status_of(port, "/channel/create?topic=t&channel=other", b"")[0] == 503
        to_nsq = subprocess.run([go_program("to_nsq"), "--topic=t", f"--nsqd-tcp-address={nsqd.tcp_address}"],
                                input=b"late\n", capture_output=True, timeout=30)
        assert to_nsq.returncode != 0 and b"E_PUB_FAILED PUB failed draining" in to_nsq.stderr
        refusals = {b"SUB t other\n": b"E_SUB_FAILED SUB failed draining",
                    b"SUB new c\n": b"E_SUB_FAILED SUB failed draining",
                    Mpub("t", [b"x", b"y"]).to_bytes(): b"E_MPUB_FAILED MPUB failed draining",
                    Mpub("new", [b"x"]).to_bytes(): b"E_MPUB_FAILED MPUB failed draining",
                    Dpub("t", 100, b"x").to_bytes(): b"E_DPUB_FAILED DPUB failed draining"}
        for command, refusal in refusals.items():
            other = V2(nsqd.tcp_port)
            assert other.command(command) == (1, refusal)
            other.close()
        assert "new" not in [topic["topic_name"] for topic in stats(nsqd)["topics"]]

        tail = Utility("nsq_tail", "--topic=t", "--channel=c", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       program=go_program("nsq_tail"))
        holder.close()  # its message in flight goes back to the channel
        assert nsqd.proc.wait(timeout=30) == 0
        tail.wait_for(lambda: len(tail.stdout) == 11, what="every message")
        assert sorted(tail.stdout) == sorted([b"m%d\n" % n for n in range(10)] + [b"deferred\n"])
        tail.proc.send_signal(signal.SIGINT)
        tail.proc.wait(timeout=10)
        log = nsqd.log()
        assert "DRAIN: received SIGTERM" in log and "DRAIN: every topic and channel is empty" in log
    finally:
        nsqd.stop()


@requires_go
def test_the_lookupds_stop_listing_a_draining_node_and_pynsq_drains_it(tmp_path):
    """Go's nsqlookupd and ours: the node's topics leave /lookup as the drain starts (no new
    publisher or consumer finds it), the node stays in /nodes; a pynsq Reader connected before
    keeps consuming until nothing is left."""
    lookupds = [GoLookupdProcess(), LookupdProcess()]
    nsqd = None
    try:
        nsqd = NsqdProcess(f"--data-path={tmp_path}", *[f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
                                                          for lookupd in lookupds])
        http(nsqd.http_port, "/topic/create?topic=t", b"")
        http(nsqd.http_port, "/channel/create?topic=t&channel=c", b"")
        http(nsqd.http_port, "/mpub?topic=t", b"\n".join(b"m%d" % n for n in range(50)))
        http(nsqd.http_port, "/channel/pause?topic=t&channel=c", b"")  # nothing consumed before the drain
        http(nsqd.http_port, "/pub?topic=orphan", b"kept for a first channel")

        def producers(lookupd) -> list:
            code, body = status_of(lookupd.http_port, "/lookup?topic=t")
            return json.loads(body)["producers"] if code == 200 else []

        def nodes(lookupd) -> list:
            return json.loads(http(lookupd.http_port, "/nodes"))["producers"]

        for lookupd in lookupds:
            wait_until(lambda: producers(lookupd), what="registered")
        reader = subprocess.Popen([
            sys.executable, "-c", PYNSQ_READER, str(nsqd.tcp_port)], stdout=subprocess.PIPE)
        wait_until(lambda: json.loads(http(nsqd.http_port, "/stats?format=json&topic=t"))["topics"][0]["channels"][0]
                   ["clients"], what="pynsq subscribed")
        start_drain(nsqd)
        for lookupd in lookupds:
            wait_until(lambda: not producers(lookupd), what="unlisted")
            assert [node["tcp_port"] for node in nodes(lookupd)] == [nsqd.tcp_port]
        assert status_of(nsqd.http_port, "/config/drain", b"true", "PUT") == (200, b"true")  # a second: no change
        # a first channel for a topic's own backlog is allowed, and registered nowhere
        http(nsqd.http_port, "/channel/create?topic=orphan&channel=first", b"")
        wait_until(lambda: "TOPIC(orphan): new channel(first)" in nsqd.log(), what="channel created")
        assert "REGISTER orphan first" not in nsqd.log()
        assert status_of(nsqd.http_port, "/channel/create?topic=orphan&channel=second", b"")[0] == 503
        http(nsqd.http_port, "/channel/delete?topic=orphan&channel=first", b"")  # its message goes with it
        http(nsqd.http_port, "/channel/unpause?topic=t&channel=c", b"")  # the reader's go signal
        assert nsqd.proc.wait(timeout=60) == 0
        reader.wait(timeout=30)
        assert sorted(reader.stdout.read().split()) == sorted(b"m%d" % n for n in range(50))
    finally:
        if nsqd is not None:
            nsqd.stop()
        for lookupd in lookupds:
            lookupd.stop()


# A pynsq Reader that prints each body and stops once its nsqd is gone.
PYNSQ_READER = """
import sys, nsq, tornado.ioloop
def handler(message):
    print(message.body.decode(), flush=True)
    return True
reader = nsq.Reader(topic="t", channel="c", nsqd_tcp_addresses=[f"127.0.0.1:{sys.argv[1]}"],
                    message_handler=handler, max_in_flight=5)
connected = []
def check():
    if reader.conns:
        connected.append(True)
    elif connected:
        tornado.ioloop.IOLoop.current().stop()
tornado.ioloop.PeriodicCallback(check, 200).start()
nsq.run()
"""


@pytest.mark.parametrize("body, expected", [
    (b"nonsense", (400, b'{"message":"INVALID_VALUE"}')),
    (b"false", (400, b'{"message":"INVALID_VALUE"}')),
    (b"", (413, b'{"message":"INVALID_VALUE"}')),
])
def test_bad_drain_requests_are_refused_as_nsqd_refuses_a_bad_option_value(nsqd_for_bad_input, body, expected):
    port = nsqd_for_bad_input.http_port
    assert status_of(port, "/config/drain", body, "PUT") == expected
    assert status_of(port, "/config/drain") == (200, b"false")
    assert "draining" not in json.loads(http(port, "/info"))


@pytest.fixture(scope="module")
def nsqd_for_bad_input(tmp_path_factory):
    nsqd = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('bad')}")
    yield nsqd
    nsqd.stop()


def test_sigterm_keeps_its_meaning_by_default_and_is_shown_in_config(nsqd_for_bad_input):
    assert http(nsqd_for_bad_input.http_port, "/config/sigterm") == b"clean-shutdown"


def test_a_bad_sigterm_flag_stops_nsqd_at_start():
    result = subprocess.run([sys.executable, "-m", "nsqd", "--sigterm=later"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "--sigterm must be one of clean-shutdown, drain, got 'later'" in result.stderr


def test_the_config_file_key_sets_the_drain_on_sigterm_and_an_empty_node_exits_at_once(tmp_path):
    config = tmp_path / "nsqd.cfg"
    config.write_text('sigterm = "drain"\n')
    nsqd = NsqdProcess(f"--data-path={tmp_path}", f"--config={config}")
    try:
        assert http(nsqd.http_port, "/config/sigterm") == b"drain"
        nsqd.proc.send_signal(signal.SIGTERM)
        assert nsqd.proc.wait(timeout=30) == 0
        assert "DRAIN: received SIGTERM" in nsqd.log()
    finally:
        nsqd.stop()


def test_sigint_still_stops_a_draining_nsqd_and_keeps_what_is_left(tmp_path):
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--sigterm=drain")
    http(nsqd.http_port, "/pub?topic=kept", b"left")
    nsqd.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "DRAIN: received SIGTERM" in nsqd.log(), what="draining")
    nsqd.proc.send_signal(signal.SIGTERM)  # a second SIGTERM changes nothing
    wait_until(lambda: "already draining" in nsqd.log(), what="second SIGTERM logged")
    assert nsqd.proc.poll() is None
    assert nsqd.stop(signal.SIGINT) == 0
    again = NsqdProcess(f"--data-path={tmp_path}")
    try:
        assert json.loads(http(again.http_port, "/stats?format=json"))["topics"][0]["depth"] == 1
    finally:
        again.stop()


@requires_go
def test_nsqs_nsqadmin_reads_a_draining_nsqd_and_nsqs_nsqd_its_data_directory_after(tmp_path):
    """The extra /stats and /info keys disturb neither Go's nsqadmin nor, after the drain, Go's
    nsqd reading the data directory (a drain changes no file format)."""
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--broadcast-address=127.0.0.1")
    admin = None
    try:
        port = nsqd.http_port
        http(port, "/topic/create?topic=t", b"")
        http(port, "/channel/create?topic=t&channel=c", b"")
        http(port, "/mpub?topic=t", b"a\nb\nc")
        admin = GoAdminProcess(f"--nsqd-http-address=127.0.0.1:{port}")
        start_drain(nsqd)
        channel = json.loads(http(admin.http_port, "/api/topics/t/c"))
        assert channel["depth"] == 3 and channel["message"] == ""
        node = json.loads(http(admin.http_port, f"/api/nodes/127.0.0.1:{port}"))
        assert node["total_messages"] == 3
        tail = Utility("nsq_tail", "--topic=t", "--channel=c", f"--nsqd-tcp-address={nsqd.tcp_address}",
                       program=go_program("nsq_tail"))  # without -n, which can exit before its last FIN
        assert nsqd.proc.wait(timeout=30) == 0
        tail.wait_for(lambda: len(tail.stdout) == 3, what="the three messages")
        tail.proc.send_signal(signal.SIGINT)
        tail.proc.wait(timeout=10)
    finally:
        if admin is not None:
            admin.stop()
        nsqd.stop()
    go = GoNsqdProcess(f"--data-path={tmp_path}")
    try:
        [topic] = json.loads(http(go.http_port, "/stats?format=json"))["topics"]
        assert (topic["topic_name"], topic["depth"], [c["depth"] for c in topic["channels"]]) == ("t", 0, [0])
    finally:
        go.stop()


def test_an_ephemeral_channel_left_by_its_last_consumer_takes_its_messages_with_it(tmp_path):
    """As always: the drain then has nothing left to wait for (README, Draining a node)."""
    nsqd = NsqdProcess(f"--data-path={tmp_path}")
    try:
        consumer = V2(nsqd.tcp_port)
        assert consumer.command(b"SUB e c#ephemeral\n") == (0, b"OK")  # RDY 0: it takes nothing
        http(nsqd.http_port, "/mpub?topic=e", b"1\n2\n3")
        start_drain(nsqd)
        assert stats(nsqd)["drain_messages_left"] == 3
        consumer.close()
        assert nsqd.proc.wait(timeout=30) == 0
    finally:
        nsqd.stop()
