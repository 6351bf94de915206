"""A backlog far larger than memory, with nsqd's default flags: RSS stays bounded, the
rest goes to disk, and the backlog drains at full speed.

    python bench/bench_backlog.py --messages=10000000

Starts its own nsqd with default flags (--mem-queue-size=10000), creates a topic and a
channel, publishes --messages 200-byte messages in MPUB batches of 200 from 2 processes
while nobody consumes, then drains the channel with bench_reader.py (RDY 2500, FIN each).
Samples nsqd's RSS every 0.2 s throughout and prints the peak of each phase, the disk
space the backlog took, and both rates with nsqd's CPU seconds per million messages.
"""

import argparse
import http.client
import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, rss_kib, running_nsqd  # noqa: E402
from bench.workers import run_workers  # noqa: E402
from common.commands import Mpub  # noqa: E402

TOPIC = "backlog_bench"
BATCH = 200
PUBLISHERS = 2


class PeakRss:
    """nsqd's largest RSS since the last ``take``, sampled by a thread."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_kib(self.pid))

    def take(self) -> int:
        peak, self.peak = max(self.peak, rss_kib(self.pid)), 0
        return peak

    def stop(self) -> None:
        self._stop.set()


def publish(address: str, batches: int, deadline: float, result) -> None:
    conn = BenchConnection(address)
    batch = Mpub(TOPIC, [b"b" * 200] * BATCH).to_bytes()
    for _ in range(batches):
        conn.send(batch)
        conn.read_response()
    conn.close()
    result.put(batches * BATCH)


def create_channel(http_address: str) -> None:
    host, _, port = http_address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port))
    for path in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel=ch"):
        conn.request("POST", path)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"POST {path}: HTTP {response.status}")
    conn.close()


def disk_bytes(data_path: Path) -> int:
    return sum(path.stat().st_size for path in data_path.glob("*.dat"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    args = parser.parse_args()
    with running_nsqd() as (proc, address, http_address):
        data_path = Path(next(arg.split("=", 1)[1] for arg in proc.args if arg.startswith("--data-path=")))
        create_channel(http_address)
        rss = PeakRss(proc.pid)
        baseline = rss.take()
        cpu = cpu_seconds(proc.pid)
        published, elapsed = run_workers(publish, (address, args.messages // (BATCH * PUBLISHERS)), PUBLISHERS, 0)
        publish_cpu, cpu = cpu_seconds(proc.pid) - cpu, cpu_seconds(proc.pid)
        publish_peak, on_disk = rss.take(), disk_bytes(data_path)
        print(f"published {published:,} in {elapsed:.1f}s: {published / elapsed:,.0f} msgs/s, nsqd "
              f"{publish_cpu / published * 1e6:.2f} CPU s per million; peak RSS {publish_peak / 1024:.0f}MiB "
              f"(baseline {baseline / 1024:.0f}MiB); {on_disk / 2**30:.2f}GiB on disk", flush=True)
        reader = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_reader.py"),
                                 f"--nsqd-tcp-address={address}", f"--topic={TOPIC}", f"--count={published}",
                                 "--runfor=3600s"], capture_output=True, text=True, check=True)
        drained = float(re.search(r"([\d.]+)ops/s", reader.stdout).group(1))
        drain_cpu = cpu_seconds(proc.pid) - cpu
        print(f"drained at {drained:,.0f} msgs/s, nsqd {drain_cpu / published * 1e6:.2f} CPU s per million; "
              f"peak RSS {rss.take() / 1024:.0f}MiB; {disk_bytes(data_path) / 2**20:.0f}MiB left on disk")
        rss.stop()


if __name__ == "__main__":
    main()
