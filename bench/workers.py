"""What the load generators share: worker processes run until a deadline, and a blocking
HTTP/1.1 response reader for keep-alive benchmark clients."""

import multiprocessing
import socket
import time


def run_workers(target, args: tuple, count: int, runfor: float) -> tuple[int, float]:
    """Run ``target(*args, deadline, result_queue)`` in ``count`` processes; each puts one
    number on the queue. Returns their sum and the elapsed seconds."""
    result = multiprocessing.Queue()
    start = time.monotonic()
    workers = [multiprocessing.Process(target=target, args=(*args, start + runfor, result)) for _ in range(count)]
    for worker in workers:
        worker.start()
    total = sum(result.get() for _ in workers)
    for worker in workers:
        worker.join()
    return total, time.monotonic() - start


def read_http_response(sock: socket.socket, buf: bytearray) -> tuple[bytes, bytearray]:
    """One whole 200 response (head, Content-Length body): its body and what follows it."""
    while True:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = bytes(buf[:head_end]).lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
            end = head_end + 4 + length
            if len(buf) >= end:
                if not head.startswith(b"http/1.1 200"):
                    raise RuntimeError(bytes(buf[:end]).decode())
                return bytes(buf[head_end + 4:end]), buf[end:]
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        buf += data
