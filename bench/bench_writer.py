"""Publish as fast as possible with MPUB batches, like NSQ's bench/bench_writer.

    python bench/bench_writer.py --nsqd-tcp-address=127.0.0.1:4150 --runfor=10s --size=200 --batch-size=200

Each of --connections processes sends the same prebuilt MPUB batch and waits for its OK,
over TLS and/or with snappy or deflate if asked (--tls, --snappy, --deflate).
Prints messages/s and MB/s over the whole run.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nsq_socket import add_feature_flags, connect, features  # noqa: E402
from common.commands import Mpub  # noqa: E402
from bench.workers import run_workers  # noqa: E402
from common.goflags import parse_duration  # noqa: E402


def publish(address: str, topic: str, size: int, batch_size: int, feature_values: dict, deadline: float,
            result) -> None:
    conn = connect(address, feature_values)
    batch = Mpub(topic, [b"a" * size] * batch_size).to_bytes()
    sent = 0
    while time.monotonic() < deadline:
        conn.send(batch)
        conn.read_response()
        sent += batch_size
    conn.close()
    result.put(sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="sub_bench")
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--connections", type=int, default=2)
    add_feature_flags(parser)
    args = parser.parse_args()
    total, elapsed = run_workers(publish, (args.nsqd_tcp_address, args.topic, args.size, args.batch_size,
                                           features(args)), args.connections, parse_duration(args.runfor))
    print(f"duration: {elapsed:.3f}s - {total * args.size / elapsed / 1024 / 1024:.3f}mb/s - "
          f"{total / elapsed:.3f}ops/s - {elapsed / total * 1e6:.3f}us/op")


if __name__ == "__main__":
    main()
