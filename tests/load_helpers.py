"""Load for fault tests: publishers that keep a ledger of what nsqd acknowledged or refused,
and consumers that FIN everything, over real sockets."""

import httpx
import trio

from common.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from common.message import decode_message

from .datadir import mpub, pub, subscribe
from .helpers import RawClient

DISCONNECTED = (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class Ledger:
    """What publishers sent and what nsqd answered, by body."""

    def __init__(self):
        self.acknowledged: set[bytes] = set()
        self.refused: set[bytes] = set()
        self.sent = 0

    def bodies(self, prefix: bytes, count: int, size: int = 0) -> list[bytes]:
        """``count`` new unique bodies, padded to ``size`` bytes."""
        first, self.sent = self.sent, self.sent + count
        return [(b"%s-%d-" % (prefix, n)).ljust(size, b".") for n in range(first, first + count)]


async def pipelined_publisher(port: int, topic: str, ledger: Ledger, prefix: bytes, window: int = 20,
                              batch: int = 1, size: int = 0) -> None:
    """Keep ``window`` PUBs (batch 1) or MPUBs in flight on one connection until it breaks;
    each answer settles the oldest command (answers keep the commands' order)."""
    outstanding: list[list[bytes]] = []
    try:
        client = await RawClient.connect(port)
        while True:
            while len(outstanding) < window:
                bodies = ledger.bodies(prefix, batch, size)
                await client.send(pub(topic, bodies[0]) if batch == 1 else mpub(topic, bodies))
                outstanding.append(bodies)
            frame = await client.read_frame(timeout=10)
            ok = frame.frame_type == FRAME_TYPE_RESPONSE and frame.data == b"OK"
            (ledger.acknowledged if ok else ledger.refused).update(outstanding.pop(0))
    except DISCONNECTED:
        return


async def http_publisher(http_port: int, topic: str, ledger: Ledger, prefix: bytes, size: int = 0) -> None:
    """POST /pub one message at a time until nsqd goes away."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=10) as http:
        while True:
            [body] = ledger.bodies(prefix, 1, size)
            try:
                response = await http.post("/pub", params={"topic": topic}, content=body)
            except httpx.TransportError:
                return
            (ledger.acknowledged if response.status_code == 200 else ledger.refused).add(body)


async def consume(port: int, topic: str, channel: str, received: list[bytes], rdy: int = 200,
                  quiet: float | None = None) -> None:
    """SUB and FIN every message, until the connection breaks or ``quiet`` seconds pass without one."""
    client = await subscribe(port, topic, channel, rdy=rdy)
    try:
        while True:
            with trio.move_on_after(float("inf") if quiet is None else quiet) as idle:
                data = await client.stream.receive_some(1 << 20)
            if idle.cancelled_caught or not data:
                break
            client.reader.receive_data(data)
            fins = []
            while (frame := client.reader.next_frame()) is not None:
                if frame.frame_type == FRAME_TYPE_MESSAGE:
                    message = decode_message(frame.data)
                    received.append(message.body)
                    fins.append(b"FIN " + message.id + b"\n")
            if fins:
                await client.send(b"".join(fins))
    except DISCONNECTED:
        pass
    finally:
        await client.close()


async def drain_all(port: int, topic: str, channel: str = "c", quiet: float = 0.5) -> list[bytes]:
    """Every message the channel delivers until ``quiet`` seconds pass without one."""
    received: list[bytes] = []
    await consume(port, topic, channel, received, rdy=2500, quiet=quiet)
    return received
