"""nsqd holding many idle topics and channels: RSS and CPU must stay flat.

    python bench/bench_idle_topics.py --topics=10000 --channels=2 --watch=60s

Starts its own nsqd, creates the topics and their channels over HTTP (one keep-alive
connection), lets nsqd settle, then samples its RSS and CPU time every 5 s for --watch.
Idle means no per-object timer may wake: the CPU nsqd uses while watched is its own
housekeeping (the fixed 100 ms queue-scan cadence, the once-a-second disk sync check), not
a cost per topic.
"""

import argparse
import http.client
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsqd_process import cpu_seconds, rss_kib, running_nsqd  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

SAMPLE_EVERY = 5.0


def create(address: str, topics: int, channels: int) -> None:
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port))
    for t in range(topics):
        post(conn, f"/topic/create?topic=idle{t:05d}")
        for c in range(channels):
            post(conn, f"/channel/create?topic=idle{t:05d}&channel=ch{c}")
    conn.close()


def post(conn: http.client.HTTPConnection, path: str) -> None:
    conn.request("POST", path)
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"POST {path}: HTTP {response.status}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--watch", default="60s")
    args = parser.parse_args()
    with running_nsqd() as (proc, _, http_address):
        baseline = rss_kib(proc.pid)
        started = time.monotonic()
        create(http_address, args.topics, args.channels)
        created_in = time.monotonic() - started
        time.sleep(SAMPLE_EVERY)  # the metadata file's last rewrite
        samples = []
        watch_until = time.monotonic() + parse_duration(args.watch)
        while True:
            samples.append((time.monotonic(), rss_kib(proc.pid), cpu_seconds(proc.pid)))
            print(f"  t={samples[-1][0] - samples[0][0]:5.1f}s rss={samples[-1][1] / 1024:7.1f}MiB "
                  f"cpu={samples[-1][2]:6.2f}s", flush=True)
            if samples[-1][0] >= watch_until:
                break
            time.sleep(SAMPLE_EVERY)
        (t0, rss0, cpu0), (t1, rss1, cpu1) = samples[0], samples[-1]
        print(f"{args.topics} topics x {args.channels} channels created in {created_in:.1f}s - "
              f"rss {rss0 / 1024:.1f}MiB (baseline {baseline / 1024:.1f}MiB, "
              f"{(rss0 - baseline) * 1024 / (args.topics * (args.channels + 1)):.0f} bytes per topic or channel) - "
              f"over {t1 - t0:.0f}s idle: rss {(rss1 - rss0) / 1024:+.1f}MiB, "
              f"cpu {cpu1 - cpu0:.2f}s ({(cpu1 - cpu0) / (t1 - t0) * 100:.2f}% of a core)")


if __name__ == "__main__":
    main()
