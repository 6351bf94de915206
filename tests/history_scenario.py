"""Raw snapshots of a small cluster that does everything the rollup job must get right, in the
batches a recorder and its late files would deliver them.

Three nodes polled every 10 s from 23:20 to 00:50 UTC (so windows cross an hour, a day and the
polls fall on minute and hour boundaries), every 3 s for five minutes (20 polls a minute), with:

- node 1 restarting at 23:55:05 (a new ``start_time``; every counter counts from zero again, and
  the requeues of orders/audit stand at 2 before and after, so only the restart shows they moved);
- node 0 restarting at 00:32:05 in files written before ``start_time`` was recorded (no such
  column), seen only by its counters going down;
- node 2 missing 5 polls from 23:30:00 (a gap across a minute boundary) and every poll from
  00:00:00 to 00:17:00 (past the 15-minute gap, so it starts again from a new baseline);
- clicks/late on node 1 only from 23:40 to 00:15, and again from 00:40 (a new baseline);
- paused channels, deferred messages, topic rows without e2e percentiles;
- node 2's rows of 23:35-23:50 held back and delivered late, after the minutes around them were
  rolled up.

Counters move by seeded random amounts, so every run of the scenario writes the same rows.
"""

import random
from pathlib import Path

import pyarrow.parquet as pq

from .history_raw import missing, utc, write_raw

MIDNIGHT = 1_795_132_800  # 2026-11-20 00:00:00 UTC
START, END = MIDNIGHT - 2400, MIDNIGHT + 3000
NODES = ("10.0.0.1:4151", "10.0.0.2:4151", "10.0.0.3:4151")
SERIES = (("orders", ""), ("orders", "billing"), ("orders", "audit"), ("clicks", ""), ("clicks", "stats"),
          ("clicks", "late"))
FAST_POLLS = (MIDNIGHT - 1080, MIDNIGHT - 780)  # every 3 s from 23:42 to 23:47
RESTARTS = {NODES[1]: MIDNIGHT - 295, NODES[0]: MIDNIGHT + 1925}
NO_START_TIME = (MIDNIGHT + 1800, MIDNIGHT + 2100)  # files from before start_time was recorded
MISSING = {NODES[2]: [(MIDNIGHT - 1800, MIDNIGHT - 1760), (MIDNIGHT, MIDNIGHT + 1020)]}
LATE_CHANNEL = (NODES[1], [(MIDNIGHT - 1200, MIDNIGHT + 900), (MIDNIGHT + 2400, END)])
HELD_BACK = (NODES[2], MIDNIGHT - 1500, MIDNIGHT - 600)
BATCH_ENDS = (MIDNIGHT - 600, MIDNIGHT + 1200, MIDNIGHT + 2100, END + 1)
PAUSED = {("orders", "audit"): (MIDNIGHT - 900, MIDNIGHT + 600)}


def poll_times() -> list[int]:
    slow = [ts for ts in range(START, END + 1, 10) if not FAST_POLLS[0] <= ts < FAST_POLLS[1]]
    return sorted(slow + list(range(FAST_POLLS[0], FAST_POLLS[1], 3)))


def _within(ts: int, spans: list[tuple[int, int]]) -> bool:
    return any(start <= ts <= end for start, end in spans)


def _has_series(node: str, channel: str, ts: int) -> bool:
    return channel != "late" or (node == LATE_CHANNEL[0] and _within(ts, LATE_CHANNEL[1]))


class _Series:
    """One series' counters, counting from zero again when its node restarts."""

    def __init__(self, rng: random.Random, node: str, topic: str, channel: str):
        self.rng, self.node, self.topic, self.channel = rng, node, topic, channel
        self.counts = {"message_count": 0, "requeue_count": 0, "timeout_count": 0}
        self.polls = 0

    def restart(self) -> None:
        self.counts = dict.fromkeys(self.counts, 0)
        self.polls = 0

    def row(self, ts: int, start_time: int | None) -> dict:
        rng = self.rng
        self.counts["message_count"] += rng.randint(0, 40)
        if (self.topic, self.channel) == ("orders", "audit"):
            self.counts["requeue_count"] += 2 if self.polls == 0 else 0  # 2 before a restart and after it
        elif self.channel:
            self.counts["requeue_count"] += rng.randint(0, 3)
            self.counts["timeout_count"] += rng.randint(0, 1)
        self.polls += 1
        paused = self.channel != "" and _within(ts, [PAUSED.get((self.topic, self.channel), (0, -1))])
        channel_row = self.channel != ""
        return {
            "ts": utc(ts), "node": self.node, "topic": self.topic, "channel": self.channel, "missing": False,
            "depth": rng.randint(0, 500), "backend_depth": 0,
            "in_flight": rng.randint(0, 20) if channel_row else 0,
            "deferred": rng.randint(0, 5) if channel_row else 0, **self.counts,
            "client_count": rng.randint(0, 3) if channel_row else 0, "paused": paused,
            "e2e_ns": {"0.99": rng.uniform(1e5, 1e8), "0.5": rng.uniform(1e4, 1e5)} if channel_row else {},
            "start_time": start_time,
        }


def rows() -> list[dict]:
    """Every raw row of the scenario, in poll order."""
    rng = random.Random(23)
    series = {(node, topic, channel): _Series(rng, node, topic, channel)
              for node in NODES for topic, channel in SERIES}
    start_times = {node: MIDNIGHT - 86400 + n for n, node in enumerate(NODES)}
    out = []
    for ts in poll_times():
        for node in NODES:
            if node in RESTARTS and ts >= RESTARTS[node] != start_times[node]:
                start_times[node] = RESTARTS[node]
                for key, one in series.items():
                    if key[0] == node:
                        one.restart()
            if _within(ts, MISSING.get(node, [])):
                out.append(missing(ts, node))
                continue
            start_time = None if NO_START_TIME[0] <= ts < NO_START_TIME[1] else start_times[node]
            for topic, channel in SERIES:
                if _has_series(node, channel, ts):
                    out.append(series[node, topic, channel].row(ts, start_time))
    return out


def batches() -> list[list[dict]]:
    """The rows in the order the rollup runs get them: up to each of BATCH_ENDS, node 2's rows of
    HELD_BACK's span coming only with the third batch."""
    node, held_from, held_to = HELD_BACK
    everything = rows()
    held = [row for row in everything if row["node"] == node and held_from <= row["ts"].timestamp() < held_to]
    rest = [row for row in everything if not any(row is other for other in held)]
    out, begin = [], START
    for number, end in enumerate(BATCH_ENDS):
        batch = [row for row in rest if begin <= row["ts"].timestamp() < end]
        if number == 2:
            batch = held + batch
        out.append(batch)
        begin = end
    return out


def write_batch(stats_dir: Path, batch: list[dict]) -> None:
    """A batch as the recorder writes it: a file per minute (without the start_time column for
    the minutes of NO_START_TIME), late rows in files of their own."""
    by_file: dict[tuple, list[dict]] = {}
    for row in batch:
        ts = int(row["ts"].timestamp())
        by_file.setdefault((ts // 60, NO_START_TIME[0] <= ts < NO_START_TIME[1]), []).append(row)
    for (_, old_format), file_rows in sorted(by_file.items()):
        if not old_format:
            write_raw(stats_dir, file_rows)
            continue
        for path in write_raw(stats_dir, file_rows):
            table = pq.read_table(path)
            pq.write_table(table.drop_columns(["start_time"]), path)

