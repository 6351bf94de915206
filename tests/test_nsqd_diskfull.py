"""A full disk: publishing fails loudly, /ping says why, and nothing acknowledged is lost.

The data directory is a 2 MiB tmpfs mounted by the test (needs root, or CAP_SYS_ADMIN);
a ballast file fills it, and deleting the ballast frees the space again.
"""

import os
import struct
import subprocess
from collections import Counter
from functools import partial

import httpx
import pytest
import trio

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, drain, mpub, multiset, pub, publish, receive, restart, subscribe, wait_until
from .helpers import RawClient
from .load_helpers import Ledger, drain_all, http_publisher, pipelined_publisher

# bigger than a page, so each one needs new blocks from the file system
BODY_SIZE = 8192


@pytest.fixture
def small_fs(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs to fill (needs root): {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(path) -> None:
    """Write ``path`` until the file system has no block left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                if len(chunk) == 1:
                    return
                chunk = chunk[:len(chunk) // 2]
    finally:
        os.close(fd)


def body(n: int) -> bytes:
    return (b"%06d" % n).ljust(BODY_SIZE, b".")


async def failed_publish(port: int, command: bytes) -> bytes:
    """Send one publish command; the error it gets. The connection must then be closed."""
    client = await RawClient.connect(port)
    await client.send(command)
    error = await client.read_error()
    await client.assert_closed()
    return error


async def test_full_disk_fails_publishes_then_recovers(small_fs):
    flags = ("--mem-queue-size=0", "--max-bytes-per-file=65536")
    server = Server(small_fs, *flags)
    http = httpx.Client(base_url=server.http)
    consumer = await subscribe(server.tcp_port, "full", "c", rdy=3)
    acknowledged = [body(n) for n in range(10)]
    await publish(server.tcp_port, "full", acknowledged)
    assert len(await receive(consumer, 3)) == 3
    assert http.get("/ping").text == "OK"

    fill(small_fs / "ballast")
    await consumer.close()  # its in-flight messages come back and cannot go to disk: kept in memory
    assert (await failed_publish(server.tcp_port, pub("full", body(100)))).startswith(b"E_PUB_FAILED PUB failed ")
    assert (await failed_publish(server.tcp_port, mpub("full", [body(101), body(102)]))) \
        .startswith(b"E_MPUB_FAILED MPUB failed ")
    answer = http.post("/pub", params={"topic": "full"}, content=body(103))
    # NSQ v1.3 answers any failed put with 503 EXITING; this nsqd says 500 PUB_FAILED
    assert answer.status_code in (500, 503) and answer.json()["message"] in ("PUB_FAILED", "EXITING")
    ping = http.get("/ping")
    assert ping.status_code == 500
    assert ping.text.startswith("NOK - ") and "No space left on device" in ping.text
    # reading the disk queue is no sign that writing works again (NSQ sets health on writes)
    reader = await subscribe(server.tcp_port, "full", "c", rdy=5)
    assert len(await receive(reader, 5)) == 5  # the 3 requeued, kept in memory, then 2 off the disk
    assert http.get("/ping").text == ping.text
    await reader.close()

    os.remove(small_fs / "ballast")
    later = [body(n) for n in range(200, 205)]
    await publish(server.tcp_port, "full", later)
    assert http.get("/ping").text == "OK"
    assert http.post("/mpub", params={"topic": "full", "binary": "true"},
                     content=struct.pack(">i", 1) + struct.pack(">i", BODY_SIZE) + body(300)).status_code == 200
    http.close()

    server = restart(server, *flags)
    # everything acknowledged comes back, and nothing that was refused
    got = await drain(server.tcp_port, "full", "c", 16)
    assert multiset(got) == Counter(acknowledged + later + [body(300)])
    assert server.stop() == 0


def ballast_leaving(path, free_bytes: int) -> None:
    """A file that takes all but ``free_bytes`` of the file system's free space."""
    stats = os.statvfs(path.parent)
    with open(path, "wb") as handle:
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - free_bytes))


async def test_disk_filling_up_during_a_burst_loses_nothing_acknowledged(small_fs):
    """Concurrent publishers (pipelined PUB, MPUB, HTTP /pub) with --sync-every=1 run the
    disk full: they get refusals, nsqd stays up and says why, recovers when space comes
    back, and after a restart every acknowledged message is there, none refused by a PUB."""
    flags = ("--mem-queue-size=0", "--max-bytes-per-file=65536", "--sync-every=1")
    server = Server(small_fs, *flags)
    await (await subscribe(server.tcp_port, "burst", "c")).close()
    ballast_leaving(small_fs / "ballast", 600 * 1024)
    ledger = Ledger()
    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(partial(pipelined_publisher, server.tcp_port, "burst", ledger, b"pub%d" % n,
                                       window=10, size=BODY_SIZE))
        nursery.start_soon(partial(pipelined_publisher, server.tcp_port, "burst", ledger, b"mpub", window=2,
                                   batch=4, size=BODY_SIZE))
        nursery.start_soon(partial(http_publisher, server.http_port, "burst", ledger, b"http", size=BODY_SIZE))
        await wait_until(lambda: len(ledger.refused) >= 10, timeout=10, what="refusals")
        nursery.cancel_scope.cancel()
    assert len(ledger.acknowledged) > 20
    http = httpx.Client(base_url=server.http)
    ping = http.get("/ping")
    assert ping.status_code == 500 and "No space left on device" in ping.text

    os.remove(small_fs / "ballast")
    later = ledger.bodies(b"later", 5, BODY_SIZE)
    await publish(server.tcp_port, "burst", later)
    assert http.get("/ping").text == "OK"
    http.close()

    server = restart(server, *flags)
    delivered = await drain_all(server.tcp_port, "burst")
    assert len(delivered) == len(set(delivered))
    assert ledger.acknowledged | set(later) <= set(delivered)
    refused_pubs = {body for body in ledger.refused if not body.startswith(b"mpub")}
    assert not refused_pubs & set(delivered)
    assert server.stop() == 0
