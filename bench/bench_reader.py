"""Consume as fast as possible, FIN every message, like NSQ's bench/bench_reader.

    python bench/bench_reader.py --nsqd-tcp-address=127.0.0.1:4150 --runfor=10s --rdy=2500

Runs until --runfor passes (or --count messages arrive), then prints messages/s and MB/s
between the first and the last message received. --tls, --snappy, --deflate as bench_writer.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nsq_socket import add_feature_flags, connect, features  # noqa: E402
from common.commands import Rdy, Sub  # noqa: E402
from common.frames import FRAME_TYPE_MESSAGE  # noqa: E402
from common.goflags import parse_duration  # noqa: E402


def consume(address: str, topic: str, channel: str, rdy: int, runfor: float, count: int,
            feature_values: dict) -> tuple[int, int, float]:
    conn = connect(address, feature_values)
    conn.send(Sub(topic, channel).to_bytes())
    conn.read_response()
    conn.send(Rdy(rdy).to_bytes())
    received = received_bytes = 0
    start = last = None
    deadline = time.monotonic() + runfor
    conn.sock.settimeout(1.0)
    while time.monotonic() < deadline and (not count or received < count):
        try:
            frames = conn.read_frames()
        except TimeoutError:
            continue
        fins = []
        for frame_type, data in frames:
            if frame_type == FRAME_TYPE_MESSAGE:
                if start is None:
                    start = time.monotonic()
                fins.append(b"FIN " + data[10:26] + b"\n")
                received_bytes += len(data) - 26
            elif data == b"_heartbeat_":
                fins.append(b"NOP\n")
        received += len(fins)
        if fins:
            last = time.monotonic()
            conn.send(b"".join(fins))
    elapsed = (last - start) if start is not None else 0.0
    conn.close()
    return received, received_bytes, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="sub_bench")
    parser.add_argument("--channel", default="ch")
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--rdy", type=int, default=2500)
    parser.add_argument("--count", type=int, default=0, help="stop after this many messages")
    add_feature_flags(parser)
    args = parser.parse_args()
    received, received_bytes, elapsed = consume(args.nsqd_tcp_address, args.topic, args.channel, args.rdy,
                                                 parse_duration(args.runfor), args.count, features(args))
    elapsed = max(elapsed, 1e-9)
    print(f"duration: {elapsed:.3f}s - {received_bytes / elapsed / 1024 / 1024:.3f}mb/s - "
          f"{received / elapsed:.3f}ops/s - {elapsed / max(received, 1) * 1e6:.3f}us/op")


if __name__ == "__main__":
    main()
