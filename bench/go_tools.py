"""What NSQ's Go bench tools (bench/bench_writer, bench/bench_reader) share, in Python.

Their run: every worker connects and sends IDENTIFY, then all wait for the start
(``--deadline``, a wall-clock second, or at once); the clock runs from the start until the
last worker is done; the result is one line,
``duration: 10.0012s - 38.452mb/s - 201599.234ops/s - 4.960us/op``.
Here a worker is a process (the Go tools' are goroutines, one per GOMAXPROCS).
"""

import datetime
import multiprocessing
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.goflags import format_duration

DEADLINE_FORMAT = "%Y-%m-%d %H:%M:%S"
BENCH = Path(__file__).resolve().parent
CONNECT_TIMEOUT = 30.0  # seconds for every worker to connect and IDENTIFY, once the deadline has come


def add_go_flags(parser, runfor: str, connections: int = 1) -> None:
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150", help="<addr>:<port> to connect to nsqd")
    parser.add_argument("--topic", default="sub_bench")
    parser.add_argument("--runfor", default=runfor, help="duration of time to run")
    parser.add_argument("--size", type=int, default=200, help="size of messages")
    parser.add_argument("--deadline", default="", help='deadline to start the benchmark run ("2006-01-02 15:04:05")')
    parser.add_argument("--connections", type=int, default=connections,
                        help="connections, one process each (the Go tools open GOMAXPROCS)")


def deadline_in(seconds: float) -> str:
    """A --deadline value for every tool started now, ``seconds`` away. In UTC, as the Go tools
    read it (time.Parse without a zone), with milliseconds (which time.Parse accepts after the
    seconds even where its layout has none)."""
    start = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return start.strftime(DEADLINE_FORMAT) + f".{start.microsecond // 1000:03d}"


def wait_for_deadline(deadline: str) -> None:
    """Sleep until ``deadline`` (UTC, "2006-01-02 15:04:05", seconds maybe with a fraction), if one is given."""
    if deadline:
        start = datetime.datetime.fromisoformat(deadline).replace(tzinfo=datetime.timezone.utc)
        time.sleep(max(0.0, start.timestamp() - time.time()))


def run(worker, args: tuple, connections: int, deadline: str) -> tuple[int, float, float]:
    """``worker(*args, start_barrier, results)`` in ``connections`` processes; each waits on
    the barrier once connected, then puts (count, its CPU seconds) on ``results``.
    Returns the summed count, the seconds from the start until the last one finished, and
    the workers' CPU seconds."""
    barrier = multiprocessing.Barrier(connections + 1)
    results = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=worker, args=(*args, barrier, results)) for _ in range(connections)]
    for process in workers:
        process.start()
    wait_for_deadline(deadline)
    try:
        barrier.wait(timeout=CONNECT_TIMEOUT)
    except threading.BrokenBarrierError:
        _fail(workers, "a worker did not connect")
    start = time.monotonic()
    counted = []
    while len(counted) < len(workers):
        try:
            counted.append(results.get(timeout=1.0))
        except queue.Empty:
            if any(process.exitcode for process in workers):
                _fail(workers, "a worker failed")
    elapsed = time.monotonic() - start
    for process in workers:
        process.join()
    return sum(count for count, _ in counted), elapsed, sum(cpu for _, cpu in counted)


def _fail(workers: list, why: str) -> None:
    """Stop every worker and say why the run failed (rather than wait for ever)."""
    for process in workers:
        process.kill()
        process.join()
    raise RuntimeError(why)


def result_line(count: int, size: int, elapsed: float) -> str:
    """The Go tools' last line (their us/op divides whole microseconds)."""
    elapsed = max(elapsed, 1e-9)
    per_op = int(elapsed * 1e6) / count if count else 0.0
    return (f"duration: {format_duration(elapsed)} - {count * size / elapsed / 1024 / 1024:.3f}mb/s - "
            f"{count / elapsed:.3f}ops/s - {per_op:.3f}us/op")


def client_cpu_line(name: str, cpu: float, count: int) -> str:
    """The count, and how much CPU the benchmark client itself used (to check that nsqd is the limit)."""
    return f"{name}: {count} msgs - CPU {cpu:.2f}s - {cpu * 1e6 / max(count, 1):.2f}s per million msgs"


def start_tool(name: str, *args: str) -> subprocess.Popen:
    """Run bench/``name`` with ``args``, its output to read with ``rate``."""
    return subprocess.Popen([sys.executable, str(BENCH / name), *args], stdout=subprocess.PIPE, text=True)


def rate(output: str) -> float:
    """The ops/s of a result line."""
    return float(re.search(r"([\d.]+)ops/s", output).group(1))
