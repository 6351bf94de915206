"""POST /pub, one 200-byte message per request, over keep-alive connections.

    python bench/bench_http_pub.py --nsqd-http-address=127.0.0.1:4151 --runfor=10s --connections=4

Each connection runs in its own process, sends a request, reads the answer, and repeats.
Prints requests/s over the whole run.
"""

import argparse
import multiprocessing
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.goflags import parse_duration  # noqa: E402


def request_bytes(address: str, topic: str, size: int) -> bytes:
    body = b"a" * size
    return (f"POST /pub?topic={topic} HTTP/1.1\r\nHost: {address}\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def read_response(sock: socket.socket, buf: bytearray) -> bytearray:
    """Read one whole response (headers and Content-Length body); return what follows it."""
    while True:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = bytes(buf[:head_end]).lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
            end = head_end + 4 + length
            if len(buf) >= end:
                if not head.startswith(b"http/1.1 200"):
                    raise RuntimeError(bytes(buf[:end]).decode())
                return buf[end:]
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("nsqd closed the connection")
        buf += data


def publish(address: str, topic: str, size: int, deadline: float, result) -> None:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = request_bytes(address, topic, size)
    buf = bytearray()
    sent = 0
    while time.monotonic() < deadline:
        sock.sendall(request)
        buf = read_response(sock, buf)
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
    args = parser.parse_args()
    result = multiprocessing.Queue()
    start = time.monotonic()
    deadline = start + parse_duration(args.runfor)
    workers = [multiprocessing.Process(target=publish, args=(args.nsqd_http_address, args.topic, args.size,
                                                             deadline, result))
               for _ in range(args.connections)]
    for worker in workers:
        worker.start()
    total = sum(result.get() for _ in workers)
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - start
    print(f"duration: {elapsed:.3f}s - {total / elapsed:.3f}req/s - {elapsed / total * 1e6:.3f}us/req")


if __name__ == "__main__":
    main()
