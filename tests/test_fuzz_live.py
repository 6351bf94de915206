"""nsqd under hostile TCP clients for a bounded time, while a normal client keeps working.

Fifty connections at a time send random bytes, mutated valid command streams, commands cut
off by a disconnect (FIN or RST), RDY/FIN/REQ/TOUCH/NOP floods, garbage after a negotiated
compression, bytes trickled slowly, and publish or subscribe without ever reading. Meanwhile
a producer and a consumer on their own topic publish and receive a message at a time.
Afterwards nsqd is alive, logged no unexpected error, holds no socket and lists no client
beyond the normal ones, its memory stayed bounded, and (in process) no task was left behind.
"""

import os
import random
import socket
import struct

import httpx
import trio

from common.commands import MAGIC_V2, Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch

from .helpers import NsqdProcess, RawClient, settled_task_count, task_count

CONNECTIONS = 50
BEHAVIOUR_CAP = 0.6  # seconds one hostile connection lives at most
ROUND_TRIP_TIMEOUT = 3.0
FUZZ_TOPICS = [f"fuzz{n}" for n in range(4)] + ["fuzz#ephemeral"]
FUZZ_CHANNELS = ["c0", "c1", "c2#ephemeral"]
LIMITS = ["--max-msg-size=65536", "--max-body-size=262144", "--mem-queue-size=1000", "--max-rdy-count=2500"]


def random_command(rng: random.Random) -> bytes:
    topic, channel = rng.choice(FUZZ_TOPICS), rng.choice(FUZZ_CHANNELS)
    msg_id = b"%016x" % rng.getrandbits(64)
    body = rng.randbytes(rng.randint(1, 2000))
    return rng.choice([
        lambda: Identify({"client_id": "fuzz", "heartbeat_interval": rng.choice([-1, 1000, 60000]),
                          "output_buffer_size": rng.choice([-1, 0, 64, 16384]),
                          "output_buffer_timeout": rng.choice([-1, 0, 25, 1000]),
                          "msg_timeout": rng.choice([0, 1000, 5000]), "sample_rate": rng.choice([0, 50])}),
        lambda: Auth(rng.randbytes(rng.randint(1, 40))),
        lambda: Sub(topic, channel),
        lambda: Rdy(rng.randint(0, 2500)),
        lambda: Fin(msg_id),
        lambda: Req(msg_id, rng.randint(0, 10_000)),
        lambda: Touch(msg_id),
        lambda: Cls(),
        lambda: Nop(),
        lambda: Pub(topic, body),
        lambda: Mpub(topic, [body] * rng.randint(1, 20)),
        lambda: Dpub(topic, rng.randint(0, 5000), body),
    ])().to_bytes()


def mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        kind = rng.choice(["flip", "insert", "delete", "size"])
        if kind == "flip" and at < len(data):
            data[at] = rng.randrange(256)
        elif kind == "insert":
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif kind == "delete":
            del data[at:at + rng.randint(1, 8)]
        else:
            data[at:at] = struct.pack(">i", rng.choice([-1, 0, 2**31 - 1, 65537, 262145]))
    return bytes(data)


async def drain(stream, seconds: float) -> None:
    """Read and drop what nsqd sends for a while (or until it closes)."""
    with trio.move_on_after(seconds):
        while await stream.receive_some(65536):
            pass


async def send_in_pieces(rng: random.Random, stream, data: bytes, pause: float = 0.0) -> None:
    while data:
        cut = rng.randint(1, max(1, len(data)))
        await stream.send_all(data[:cut])
        data = data[cut:]
        if pause:
            await trio.sleep(pause)  # deliberate: pieces apart in time


async def random_bytes(rng, stream):
    await stream.send_all((MAGIC_V2 if rng.random() < 0.7 else b"") + rng.randbytes(rng.randint(1, 8192)))
    await drain(stream, 0.2)


async def mutated_session(rng, stream):
    session = MAGIC_V2 + b"".join(random_command(rng) for _ in range(rng.randint(1, 12)))
    await send_in_pieces(rng, stream, MAGIC_V2 + mutate(rng, session[4:]))
    await drain(stream, 0.2)


async def valid_session(rng, stream):
    await send_in_pieces(rng, stream, MAGIC_V2 + b"".join(random_command(rng) for _ in range(rng.randint(1, 30))))
    await drain(stream, 0.2)


async def cut_off_command(rng, stream):
    command = random_command(rng)
    await stream.send_all(MAGIC_V2 + command[:rng.randrange(len(command))])


async def in_flight_floods(rng, stream):
    topic = rng.choice(FUZZ_TOPICS)
    await stream.send_all(MAGIC_V2 + Pub(topic, b"x" * 100).to_bytes() * 50 + Sub(topic, rng.choice(FUZZ_CHANNELS)).to_bytes())
    flood = [Rdy(rng.randint(0, 2500)), Fin(b"%016x" % rng.getrandbits(64)), Req(b"%016x" % rng.getrandbits(64), 10),
             Touch(b"%016x" % rng.getrandbits(64)), Nop()]
    for _ in range(rng.randint(1, 5)):
        await stream.send_all(b"".join(rng.choice(flood).to_bytes() for _ in range(100)))
        await drain(stream, 0.01)


async def never_reads(rng, stream):
    topic = rng.choice(FUZZ_TOPICS)
    if rng.random() < 0.5:
        await stream.send_all(MAGIC_V2 + Sub(topic, rng.choice(FUZZ_CHANNELS)).to_bytes() + Rdy(2500).to_bytes())
    else:
        await stream.send_all(MAGIC_V2)
    for _ in range(rng.randint(1, 10)):  # publishes, never reading an OK
        await stream.send_all(Pub(topic, rng.randbytes(1000)).to_bytes() * 20)
    await trio.sleep_forever()


async def garbage_after_compression(rng, stream):
    codec = rng.choice(["snappy", "deflate"])
    await stream.send_all(MAGIC_V2 + Identify({"feature_negotiation": True, codec: True}).to_bytes())
    await drain(stream, 0.05)
    await stream.send_all(rng.randbytes(rng.randint(1, 4096)))
    await drain(stream, 0.2)


async def trickle(rng, stream):
    await send_in_pieces(rng, stream, MAGIC_V2 + random_command(rng), pause=0.02)
    await drain(stream, 0.1)


BEHAVIOURS = [random_bytes, mutated_session, valid_session, cut_off_command, in_flight_floods, never_reads,
              garbage_after_compression, trickle]


async def hostile_connection(rng: random.Random, port: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        with trio.move_on_after(BEHAVIOUR_CAP):
            await rng.choice(BEHAVIOURS)(rng, stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        if rng.random() < 0.3:  # a reset rather than an orderly close
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()


async def hostile_clients(port: int, seconds: float, seed: int) -> int:
    """CONNECTIONS at a time, each replaced by a new one when it ends; how many there were."""
    deadline = trio.current_time() + seconds
    opened = 0

    async def keep_one_open(rng: random.Random) -> None:
        nonlocal opened
        while trio.current_time() < deadline:
            opened += 1
            await hostile_connection(rng, port)

    async with trio.open_nursery() as nursery:
        for index in range(CONNECTIONS):
            nursery.start_soon(keep_one_open, random.Random(seed * 1000 + index))
    return opened


class SteadyClient:
    """The normal client: publishes a message, receives it, FINs it; one at a time."""

    def __init__(self, producer: RawClient, consumer: RawClient):
        self.producer, self.consumer = producer, consumer
        self.round_trips = 0
        self.slowest = 0.0

    @classmethod
    async def connect(cls, port: int) -> "SteadyClient":
        producer, consumer = await RawClient.connect(port), await RawClient.connect(port)
        await consumer.sub("steady", "steady", rdy=1)
        return cls(producer, consumer)

    async def run(self, stop: trio.Event) -> None:
        while not stop.is_set():
            start = trio.current_time()
            body = b"steady %d" % self.round_trips
            with trio.fail_after(ROUND_TRIP_TIMEOUT):
                await self.producer.send(Pub("steady", body).to_bytes())
                assert await self.producer.read_response() == b"OK"
                message = await self.consumer.read_message()
                assert message.body == body
                await self.consumer.send(Fin(message.id).to_bytes())
            self.slowest = max(self.slowest, trio.current_time() - start)
            self.round_trips += 1
            await trio.sleep(0.01)  # deliberate: a steady client's pace

    async def close(self) -> None:
        await self.producer.close()
        await self.consumer.close()


async def fuzz_while_steady(port: int, seconds: float, seed: int) -> tuple[SteadyClient, int]:
    steady = await SteadyClient.connect(port)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(steady.run, stop)
        opened = await hostile_clients(port, seconds, seed)
        stop.set()
    return steady, opened


def socket_count(pid: int) -> int:
    fd_dir = f"/proc/{pid}/fd"
    count = 0
    for name in os.listdir(fd_dir):
        try:
            count += os.readlink(f"{fd_dir}/{name}").startswith("socket:")
        except FileNotFoundError:
            pass
    return count


def accept_queue(port: int) -> int:
    """Connections the kernel has completed on 127.0.0.1:port that nsqd has not accepted yet."""
    with open("/proc/net/tcp") as handle:
        for line in handle.readlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":  # LISTEN
                return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def settles_to(measure, expected, timeout: float = 8.0) -> None:
    """``measure()`` reaches ``expected`` within the timeout (else the assertion shows its value)."""
    with trio.move_on_after(timeout):
        while measure() != expected:
            await trio.sleep(0.05)
    assert measure() == expected, (measure(), expected)


async def stats(http: httpx.AsyncClient) -> dict:
    return (await http.get("/stats", params={"format": "json"})).json()


async def objects_without_fuzz_topics(http: httpx.AsyncClient) -> int:
    """nsqd's live Python objects (/stats heap_objects) once the topics the hostile clients made are
    deleted and the garbage in reference cycles is collected (POST /debug/freememory)."""
    for topic in (await stats(http))["topics"]:
        if topic["topic_name"].startswith("fuzz"):
            await http.post("/topic/delete", params={"topic": topic["topic_name"]})
    assert (await http.post("/debug/freememory")).status_code == 200
    return (await stats(http))["memory"]["heap_objects"]


def client_names(document: dict) -> list[str]:
    """Every client /stats lists: subscribed ones by topic/channel, publishers as producers."""
    names = [f"{topic['topic_name']}/{channel['channel_name']}"
             for topic in document["topics"] for channel in topic["channels"] for _ in channel["clients"]]
    return sorted(names + ["producer"] * len(document["producers"] or []))


async def test_nsqd_process_survives_hostile_clients(tmp_path):
    nsqd = NsqdProcess(f"--data-path={tmp_path}", *LIMITS)
    pid = nsqd.proc.pid
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as http:
            listening = socket_count(pid)
            warm_up, _ = await fuzz_while_steady(nsqd.tcp_port, 1.0, seed=1)
            await warm_up.close()
            await settles_to(lambda: (accept_queue(nsqd.tcp_port), socket_count(pid)), (0, listening))
            objects = await objects_without_fuzz_topics(http)

            steady, opened = await fuzz_while_steady(nsqd.tcp_port, 4.0, seed=2)

            assert nsqd.proc.poll() is None
            assert opened > 2 * CONNECTIONS
            assert steady.round_trips >= 10 and steady.slowest < ROUND_TRIP_TIMEOUT
            # every hostile connection, accepted or still queued, is gone; the steady producer,
            # its consumer and this HTTP client stay
            await settles_to(lambda: (accept_queue(nsqd.tcp_port), socket_count(pid)), (0, listening + 3))
            assert client_names(await stats(http)) == ["producer", "steady/steady"]
            await steady.close()
            # Live objects once the garbage is collected are the leak detector (+8,000-10,000 over
            # ~157,000 after this fuzz, the same before and after nsqd's poller); RSS levels off
            # around 150 MiB over repeated rounds, as the allocator keeps freed memory.
            assert abs(await objects_without_fuzz_topics(http) - objects) < 20_000
            assert rss_bytes(pid) < 192 * 2**20
        await settles_to(lambda: socket_count(pid), listening)
    finally:
        nsqd.stop()
    log = nsqd.log()
    assert "Traceback" not in log and "unexpected error" not in log, log[-5000:]


async def test_in_process_nsqd_keeps_no_task_or_connection_of_hostile_clients(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=65536, max_body_size=262144, mem_queue_size=1000)
    tasks = await settled_task_count()

    steady, opened = await fuzz_while_steady(nsqd.tcp_port, 2.0, seed=3)
    assert opened > CONNECTIONS and steady.round_trips >= 5 and steady.slowest < ROUND_TRIP_TIMEOUT
    await steady.close()
    await settles_to(lambda: (accept_queue(nsqd.tcp_port), len(nsqd.connections)), (0, 0))
    for name in list(nsqd.topics):
        nsqd.delete_topic(name)
    await settles_to(task_count, tasks)
