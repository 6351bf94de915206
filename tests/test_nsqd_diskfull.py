"""A full disk: publishing fails loudly, /ping says why, and nothing acknowledged is lost.

The data directory is a 2 MiB tmpfs mounted by the test (needs root, or CAP_SYS_ADMIN);
a ballast file fills it, and deleting the ballast frees the space again.
"""

import os
import struct
import subprocess
from collections import Counter

import httpx
import pytest

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, drain, mpub, multiset, pub, publish, receive, restart, subscribe
from .helpers import RawClient

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
