"""Consume as fast as possible, FIN every message: NSQ's bench/bench_reader's load, in Python.

    python bench/bench_reader.py --nsqd-tcp-address=127.0.0.1:4150 --runfor=10s --rdy=2500

Each of --connections workers (NSQ's tool opens GOMAXPROCS; 1 here by default, as the
issue's figures were measured) sends IDENTIFY (msg_timeout 3000) and SUB, waits for the
start, sends RDY --rdy, then writes a FIN for every message into a 4096-byte buffer, as
Go's bufio.Writer does: the buffer goes out whenever it is full, after each FIN once
``count % rdy > rdy * 0.75`` (so the last quarter of every --rdy messages are FINned one
write each), and every second. After --runfor the connection closes; the rate is the
messages received over the whole run, NSQ's result line. --count (not in NSQ's tool): each
connection stops once that many arrived, and the clock with the last one. --tls, --snappy, --deflate negotiate
those features (not in NSQ's tool).
"""

import argparse
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import go_tools  # noqa: E402
from bench.nsq_socket import add_feature_flags, connect, features  # noqa: E402
from common.commands import Rdy, Sub  # noqa: E402
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

IDENTIFY = {"short_id": "test", "long_id": "test", "msg_timeout": 3000}
WRITE_BUFFER = 4096  # bufio.Writer's default size
FLUSH_EVERY = 1.0
_HEAD = struct.Struct(">ii")


class FinWriter:
    """FINs through a bufio.Writer of WRITE_BUFFER bytes, with bench_reader's flush rule."""

    def __init__(self, conn, rdy: int):
        self.send = conn.send
        self.rdy = rdy
        self.last_buffered = int(rdy * 0.75)  # count % rdy above this: flushed after each FIN
        self.buffer = bytearray()
        self.count = 0

    def flush(self) -> None:
        if self.buffer:
            self.send(bytes(self.buffer))
            self.buffer.clear()

    def fin(self, lines: list[bytes]) -> None:
        """One FIN line per message, in order: the runs that bufio would only buffer are
        buffered at once (same 4096-byte writes), the others written one by one."""
        buffer, send, index = self.buffer, self.send, 0
        while index < len(lines):
            position = (self.count + 1) % self.rdy
            if position > self.last_buffered:
                run = min(len(lines) - index, self.rdy - position)
                for line in lines[index:index + run]:
                    buffer += line
                    send(bytes(buffer))
                    buffer.clear()
            else:
                run = min(len(lines) - index, self.last_buffered - position + 1)
                buffer += b"".join(lines[index:index + run])
                while len(buffer) > WRITE_BUFFER:
                    send(bytes(buffer[:WRITE_BUFFER]))
                    del buffer[:WRITE_BUFFER]
            index += run
            self.count += run


def consume(address: str, topic: str, channel: str, rdy: int, runfor: float, count: int, feature_values: dict,
            start, results) -> None:
    conn = connect(address, feature_values, IDENTIFY)
    start.wait()
    cpu = time.process_time()
    conn.send(Sub(topic, channel).to_bytes() + Rdy(rdy).to_bytes())
    received = read_messages(conn, rdy, runfor, count)
    conn.close()
    results.put((received, time.process_time() - cpu))


def read_messages(conn, rdy: int, runfor: float, count: int) -> int:
    """FIN messages until --runfor has passed or ``count`` arrived; how many arrived."""
    began = time.monotonic()
    end, next_flush = began + runfor, began + FLUSH_EVERY
    writer = FinWriter(conn, rdy)
    unpack_head, unread = _HEAD.unpack_from, bytearray()
    while True:
        now = time.monotonic()
        if now >= end or (count and writer.count >= count):
            return writer.count
        if now >= next_flush:
            writer.flush()
            next_flush += FLUSH_EVERY
        conn.sock.settimeout(min(end, next_flush) - now)
        try:
            unread += conn.receive()
        except TimeoutError:
            continue
        pos, length, fins = 0, len(unread), []
        while length - pos >= 8:
            size, frame_type = unpack_head(unread, pos)
            frame_end = pos + 4 + size
            if frame_end > length:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                fins.append(b"FIN %b\n" % unread[pos + 18:pos + 34])
            else:
                writer.fin(fins)
                fins = []
                if frame_type == FRAME_TYPE_ERROR:
                    print(bytes(unread[pos + 8:frame_end]).decode(), file=sys.stderr)
                writer.flush()
            pos = frame_end
        writer.fin(fins)
        del unread[:pos]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    go_tools.add_go_flags(parser, runfor="10s")
    parser.add_argument("--channel", default="ch", help="channel to receive messages on")
    parser.add_argument("--rdy", type=int, default=2500, help="RDY count to use")
    parser.add_argument("--count", type=int, default=0, help="stop once this many messages arrived")
    add_feature_flags(parser)
    args = parser.parse_args()
    count, elapsed, cpu = go_tools.run(
        consume, (args.nsqd_tcp_address, args.topic, args.channel, args.rdy, parse_duration(args.runfor),
                  args.count, features(args)), args.connections, args.deadline)
    print(go_tools.result_line(count, args.size, elapsed))
    print(go_tools.client_cpu_line("bench_reader", cpu, count))


if __name__ == "__main__":
    main()
