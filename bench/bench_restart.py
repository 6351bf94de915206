"""Time for an nsqd holding N messages on disk to restart and deliver the first one.

    python bench/bench_restart.py --messages=1000000

Fills one channel through disk (--mem-queue-size=0), stops nsqd with SIGTERM, starts it
again on the same --data-path and measures from the new process's start until a consumer
(SUB, RDY 1) has received a message. Python's own start-up is included.
"""

import argparse
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import start_nsqd  # noqa: E402
from common.commands import Mpub, Rdy, Sub  # noqa: E402
from common.frames import FRAME_TYPE_MESSAGE  # noqa: E402


def fill(address: str, messages: int, size: int) -> None:
    consumer = BenchConnection(address)
    consumer.sock.sendall(Sub("restart_bench", "ch").to_bytes())
    consumer.read_response()
    producer = BenchConnection(address)
    batch = Mpub("restart_bench", [b"r" * size] * 1000).to_bytes()
    for _ in range(messages // 1000):
        producer.sock.sendall(batch)
        producer.read_response()
    producer.close()
    consumer.close()


def first_message(address: str) -> None:
    while True:
        try:
            conn = BenchConnection(address)
            break
        except (ConnectionRefusedError, socket.timeout):
            time.sleep(0.01)
    conn.sock.sendall(Sub("restart_bench", "ch").to_bytes())
    conn.read_response()
    conn.sock.sendall(Rdy(1).to_bytes())
    while not any(frame.frame_type == FRAME_TYPE_MESSAGE for frame in conn.read_frames()):
        pass
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_path:
        flags = (f"--data-path={data_path}", "--mem-queue-size=0")
        proc, address, _ = start_nsqd(*flags)
        fill(address, args.messages, args.size)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        on_disk = sum(path.stat().st_size for path in Path(data_path).iterdir())
        started = time.monotonic()
        proc, address, _ = start_nsqd(*flags)
        first_message(address)
        elapsed = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(f"restart with {args.messages} messages ({on_disk / 1024 / 1024:.0f} MiB) on disk: "
          f"first message delivered {elapsed:.3f}s after the process started")


if __name__ == "__main__":
    main()
