"""nsqd's log of its nsqlookupd connections beside NSQ v1.3.0's nsqd (nsqd/lookup.go, lookup_peer.go).

The same script runs against Go's nsqd and ours, each registered with one Go nsqlookupd, at
--log-level=debug and info: add the peer, create and delete a topic and channels, drop the peer
and add it back (it registers what nsqd has again), stop. The lines about the lookupd (``LOOKUP``,
``LOOKUPD``, ``CI: querying``) must be the same, level included, once the time stamp is cut and
the lookupd's ports are named. Which comes first, a new topic's REGISTER or its ``CI: querying``
line, is a race in Go's nsqd (the REGISTER goes through a goroutine), and Go re-registers topics
in map order; so the lines are compared as sets, and the REGISTER/UNREGISTER lines in their order.
(Go's nsqd publishes a new peer to topic creation only after it has registered everything with
it, so a topic created meanwhile finds no lookupd to ask: the script waits for a REGISTER line
the lookup loop writes once it is idle, and creates nothing after the peer comes back.)
"""

import errno
import re

import pytest

from common.protocol_v1 import Identify, Ping, Register, Unregister
from nsqd.lookup_peer import command_text, dial_error_text, peer_info_text

from .go_nsq import GoLookupdProcess, GoNsqdProcess, requires_go
from .helpers import NsqdProcess
from .utils_helpers import http, wait_until

LOOKUP_LINE = re.compile(r"^\[nsqd\] \S+ \S+ (\w+: (?:LOOKUPD?[ (:]|CI: querying).*)$")
NOTIFY_LINE = re.compile(r"LOOKUPD\(LOOKUPD\): (topic|channel) (UN)?REGISTER ")


@pytest.fixture(scope="module")
def lookupd():  # NSQ's, so both nsqd log the same peer info
    process = GoLookupdProcess("--broadcast-address=127.0.0.1")
    yield process
    process.stop()


def lookup_lines(log: str, lookupd) -> list[str]:
    """The lookupd lines of an nsqd log, level and message, the lookupd's address and ports named."""
    lines = []
    for line in log.splitlines():
        match = LOOKUP_LINE.match(line)
        if match:
            text = match.group(1).replace(f"127.0.0.1:{lookupd.tcp_port}", "LOOKUPD")
            text = text.replace(f"TCPPort:{lookupd.tcp_port} ", "TCPPort:TCP ")
            lines.append(text.replace(f"HTTPPort:{lookupd.http_port}", "HTTPPort:HTTP").replace(
                f"127.0.0.1:{lookupd.http_port}", "LOOKUPD_HTTP"))
    return lines


def run_script(kind, lookupd, data_path, level: str) -> list[str]:
    address = f"127.0.0.1:{lookupd.tcp_port}"
    nsqd = kind(f"--data-path={data_path}", f"--log-level={level}", "--broadcast-address=127.0.0.1",
                f"--lookupd-tcp-address={address}")
    try:
        def logged(text: str, times: int = 1):
            wait_until(lambda: nsqd.log().count(text) >= times, what=f"{text!r} in the log:\n{nsqd.log()}")

        logged("peer info")
        port = nsqd.http_port
        # Go's nsqd lets topic creation see a new peer only once its lookup loop is idle again,
        # which its next REGISTER line shows; lk_t0's own lines are left out (its query may be missed)
        http(port, "/topic/create?topic=lk_t0", b"")
        logged("topic REGISTER lk_t0")
        http(port, "/topic/create?topic=lk_t1", b"")
        http(port, "/channel/create?topic=lk_t1&channel=c1", b"")
        http(port, "/channel/create?topic=lk_t1&channel=c2%23ephemeral", b"")
        http(port, "/channel/delete?topic=lk_t1&channel=c1", b"")
        http(port, "/topic/delete?topic=lk_t1", b"")
        logged("UNREGISTER lk_t1 c2#ephemeral")
        http(port, "/topic/create?topic=lk_t2", b"")
        http(port, "/topic/create?topic=lk_t3", b"")
        logged("topic REGISTER lk_t3")
        http(port, "/config/nsqlookupd_tcp_addresses", b"[]", method="PUT")
        logged("removing peer")
        http(port, "/config/nsqlookupd_tcp_addresses", f'["{address}"]'.encode(), method="PUT")
        logged("peer info", 2)
        logged("): REGISTER lk_t", 3)  # lk_t0, lk_t2 and lk_t3 registered again
    finally:
        nsqd.stop()
    return [line for line in lookup_lines(nsqd.log(), lookupd) if "lk_t0" not in line]


@requires_go
@pytest.mark.parametrize("level", ["debug", "info"])
def test_lookup_log_lines_are_nsqs(lookupd, tmp_path, level):
    (tmp_path / "go").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = run_script(GoNsqdProcess, lookupd, tmp_path / "go", level)
    ours = run_script(NsqdProcess, lookupd, tmp_path / "ours", level)
    assert sorted(ours) == sorted(theirs)
    assert [line for line in ours if NOTIFY_LINE.search(line)] == [line for line in theirs if NOTIFY_LINE.search(line)]
    assert "INFO: LOOKUPD(LOOKUPD): peer info {TCPPort:TCP HTTPPort:HTTP Version:1.3.0 BroadcastAddress:127.0.0.1}" in ours
    assert {"INFO: LOOKUPD(LOOKUPD): REGISTER lk_t2", "INFO: LOOKUPD(LOOKUPD): REGISTER lk_t3",
            "INFO: LOOKUP: closing"} <= set(ours)


# -- the pieces, without processes ----------------------------------------------------------


def test_peer_info_is_gos_struct_with_zero_values_for_what_is_missing():
    info = {"tcp_port": 4160, "http_port": 4161, "version": "1.3.0", "broadcast_address": "lk", "extra": 1}
    assert peer_info_text(info) == "{TCPPort:4160 HTTPPort:4161 Version:1.3.0 BroadcastAddress:lk}"
    assert peer_info_text({}) == "{TCPPort:0 HTTPPort:0 Version: BroadcastAddress:}"


@pytest.mark.parametrize("command, text", [
    (Register("t"), "REGISTER t"), (Register("t", "c#ephemeral"), "REGISTER t c#ephemeral"),
    (Unregister("t", "c"), "UNREGISTER t c"), (Ping(), "PING"), (Identify({"version": "1"}), "IDENTIFY"),
])
def test_commands_read_as_go_nsqs_command_string(command, text):
    assert command_text(command) == text


def test_a_refused_dial_reads_as_gos_net_error():
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Error connecting: Connection refused")
    wrapped = OSError("all attempts to connect to 127.0.0.1:1 failed")
    wrapped.__cause__ = ExceptionGroup("all attempts", [refused])
    assert dial_error_text("127.0.0.1:1", wrapped) == "dial tcp 127.0.0.1:1: connect: connection refused"
    assert dial_error_text("h:1", OSError("no errno")) == "dial tcp h:1: no errno"
