"""What GET /channel/peek costs nsqd's event loop: the longest the loop went without running a
1 ms timer while peeks of the largest answer (n=100, max_body=16384) read a backlog on disk.

    python bench/bench_peek.py [--peeks=50] [--size=16384] [--memory]

An nsqd runs in this process (its event loop is this one) with --mem-queue-size=0 (every message on
disk; --memory: all in memory instead), a channel holding 200 messages of --size bytes; a task sleeps
1 ms again and again and records how late each wake-up was, while the peeks run one after another
over HTTP from a thread. Prints the median and longest peek and the wake-ups' lateness (median, p99, max), beside
the lateness of the same loop with no peek running (on a loaded machine that baseline is far from 0).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsqd.nsqd import NSQD  # noqa: E402
from nsqd.options import default_options  # noqa: E402


async def lateness(stop: trio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        before = trio.current_time()
        await trio.sleep(0.001)
        worst.append(trio.current_time() - before - 0.001)


def peeks(port: int, count: int, size: int) -> list[float]:
    took = []
    with httpx.Client(timeout=30) as http:
        for _ in range(count):
            started = time.perf_counter()
            answer = http.get(f"http://127.0.0.1:{port}/channel/peek",
                              params={"topic": "t", "channel": "c", "n": "100", "max_body": str(min(size, 16384))})
            took.append(time.perf_counter() - started)
            # counted, not parsed: parsing megabytes of JSON here would hold the GIL the loop needs
            assert answer.status_code == 200 and answer.content.count(b'"id":') == 100, answer.content[:200]
    return took


async def main(args) -> None:
    opts = default_options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", enable_peek=True,
                           data_path=tempfile.mkdtemp(prefix="bench-peek-"),
                           mem_queue_size=1000 if args.memory else 0)
    nsqd = NSQD(opts)
    async with trio.open_nursery() as nursery:
        await nursery.start(nsqd.run)
        topic = nsqd.get_topic("t")
        topic.get_channel("c")
        topic.publish([b"x" * args.size] * 200, time.time_ns())
        for label, work in (("idle", lambda port: time.sleep(2.0)), ("peeking", None)):
            stop, late = trio.Event(), []
            nursery.start_soon(lateness, stop, late)
            took = await trio.to_thread.run_sync(work or (lambda port: peeks(port, args.peeks, args.size)),
                                                 nsqd.http_port)
            stop.set()
            late.sort()
            line = (f"{label}: loop wake-ups late by median {statistics.median(late) * 1e3:.3f} ms, "
                    f"p99 {late[int(len(late) * 0.99)] * 1e3:.2f} ms, max {late[-1] * 1e3:.1f} ms")
            if took:
                line += f"; a peek took {statistics.median(took) * 1e3:.1f} ms median, {max(took) * 1e3:.1f} max"
            print(line, flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peeks", type=int, default=50)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--memory", action="store_true")
    trio.run(main, parser.parse_args())
