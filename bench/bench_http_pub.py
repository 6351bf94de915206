"""POST /pub, one 200-byte message per request, over keep-alive connections.

    python bench/bench_http_pub.py --nsqd-http-address=127.0.0.1:4151 --runfor=10s --connections=4 [--bearer=SECRET]

Each connection runs in its own process, sends a request, reads the answer, and repeats.
Prints requests/s over the whole run.
"""

import argparse
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workers import read_http_response, run_workers  # noqa: E402
from common.goflags import parse_duration  # noqa: E402


def request_bytes(address: str, topic: str, size: int, bearer: str) -> bytes:
    body = b"a" * size
    auth = f"Authorization: Bearer {bearer}\r\n" if bearer else ""
    return (f"POST /pub?topic={topic} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def publish(address: str, topic: str, size: int, bearer: str, deadline: float, result) -> None:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = request_bytes(address, topic, size, bearer)
    buf = bytearray()
    sent = 0
    while time.monotonic() < deadline:
        sock.sendall(request)
        _, buf = read_http_response(sock, buf)
        sent += 1
    sock.close()
    result.put(sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nsqd-http-address", default="127.0.0.1:4151")
    parser.add_argument("--topic", default="http_bench")
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--bearer", default="", help="send Authorization: Bearer <secret> (--http-auth-required)")
    args = parser.parse_args()
    total, elapsed = run_workers(publish, (args.nsqd_http_address, args.topic, args.size, args.bearer),
                                 args.connections,
                                 parse_duration(args.runfor))
    print(f"duration: {elapsed:.3f}s - {total / elapsed:.3f}req/s - {elapsed / total * 1e6:.3f}us/req - {total} requests")


if __name__ == "__main__":
    main()
