"""Publish as fast as possible with MPUB batches: NSQ's bench/bench_writer's load, in Python.

    python bench/bench_writer.py --nsqd-tcp-address=127.0.0.1:4150 --runfor=10s --size=200 --batch-size=200

Each of --connections workers (NSQ's tool opens GOMAXPROCS; 1 here by default, as the
issue's figures were measured) sends IDENTIFY, waits for the start, then builds one MPUB
of --batch-size bodies, writes it, waits for the answer, and repeats until --runfor has
passed. Prints NSQ's result line (messages/s over the whole run) and this client's own CPU
use. --tls, --snappy, --deflate negotiate those features (not in NSQ's tool).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import go_tools  # noqa: E402
from bench.nsq_socket import add_feature_flags, connect, features  # noqa: E402
from common import VERSION  # noqa: E402
from common.commands import Mpub  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

IDENTIFY = {"client_id": "writer", "hostname": "writer", "user_agent": f"bench_writer/{VERSION}"}


def publish(address: str, topic: str, size: int, batch_size: int, runfor: float, feature_values: dict,
            start, results) -> None:
    conn = connect(address, feature_values, IDENTIFY)
    batch = Mpub(topic, [b"a" * size] * batch_size).to_bytes()
    start.wait()
    cpu = time.process_time()
    end = time.monotonic() + runfor
    count = 0
    while True:
        conn.send(batch)
        conn.read_response()
        count += batch_size
        if time.monotonic() > end:
            break
    conn.close()
    results.put((count, time.process_time() - cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    go_tools.add_go_flags(parser, runfor="10s")
    parser.add_argument("--batch-size", type=int, default=200, help="batch size of messages")
    add_feature_flags(parser)
    args = parser.parse_args()
    count, elapsed, cpu = go_tools.run(
        publish, (args.nsqd_tcp_address, args.topic, args.size, args.batch_size, parse_duration(args.runfor),
                  features(args)), args.connections, args.deadline)
    print(go_tools.result_line(count, args.size, elapsed))
    print(go_tools.client_cpu_line("bench_writer", cpu, count))


if __name__ == "__main__":
    main()
