"""PUB one message at a time on many connections: each sends PUB, waits for its OK, repeats.

    python bench/bench_pub.py --nsqd-tcp-address=127.0.0.1:4150 --runfor=10s --connections=16

All connections run in one process over non-blocking sockets and epoll, which costs the
client less than a process per connection would on a small machine. Prints NSQ's
bench_writer result line (messages/s over the run) and this client's CPU use.
"""

import argparse
import selectors
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import go_tools  # noqa: E402
from common.commands import MAGIC_V2, Identify, Nop, Pub  # noqa: E402
from common.frames import FRAME_TYPE_ERROR, HEARTBEAT, OK, encode_response  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

OK_FRAME = encode_response(OK)


def open_connections(address: str, count: int) -> list[socket.socket]:
    host, _, port = address.rpartition(":")
    identify = MAGIC_V2 + Identify({"client_id": "pub", "hostname": "pub"}).to_bytes()
    conns = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(identify)
        conns.append(sock)
    for sock in conns:
        if read_exactly(sock, len(OK_FRAME)) != OK_FRAME:
            raise RuntimeError("IDENTIFY was not answered OK")
        sock.setblocking(False)
    return conns


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("nsqd closed the connection")
        data += chunk
    return data


def publish(conns: list[socket.socket], command: bytes, runfor: float) -> int:
    """Every connection keeps one PUB in flight until ``runfor`` passes; the OKs counted."""
    selector = selectors.EpollSelector()
    for sock in conns:
        selector.register(sock, selectors.EVENT_READ, bytearray())
        sock.send(command)
    end = time.monotonic() + runfor
    answered, open_count = 0, len(conns)
    while open_count:
        for key, _ in selector.select():
            sock, unread = key.fileobj, key.data
            unread += sock.recv(65536)
            while len(unread) >= 8:
                size = int.from_bytes(unread[:4], "big")
                if len(unread) < 4 + size:
                    break
                frame, unread[:4 + size] = bytes(unread[:4 + size]), b""
                if frame == OK_FRAME:
                    answered += 1
                    if time.monotonic() < end:
                        sock.send(command)
                    else:
                        selector.unregister(sock)
                        open_count -= 1
                elif frame[8:] == HEARTBEAT:
                    sock.send(Nop().to_bytes())
                elif int.from_bytes(frame[4:8], "big") == FRAME_TYPE_ERROR:
                    raise RuntimeError(frame[8:].decode())
    return answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    go_tools.add_go_flags(parser, runfor="10s", connections=16)
    args = parser.parse_args()
    conns = open_connections(args.nsqd_tcp_address, args.connections)
    command = Pub(args.topic, b"a" * args.size).to_bytes()
    go_tools.wait_for_deadline(args.deadline)
    cpu, start = time.process_time(), time.monotonic()
    count = publish(conns, command, parse_duration(args.runfor))
    elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
    for sock in conns:
        sock.close()
    print(go_tools.result_line(count, args.size, elapsed))
    print(go_tools.client_cpu_line("bench_pub", cpu, count))


if __name__ == "__main__":
    main()
