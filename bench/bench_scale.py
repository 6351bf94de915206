"""nsqd's memory and idle CPU at scale, NSQ's Go nsqd v1.3.0 and ours side by side (issue 22 §3).

    python bench/bench_scale.py [--rounds=3] [--messages=1000000] [--size=200] [--busy-topics=100]
                                [--topics=10000] [--channels=2] [--consumers=5000] [--window=30s] [--quick]

Each round sets the scene on a fresh Go nsqd and then on a fresh one of ours (Go, ours, Go, ours,
...), same flags (NSQ's defaults but for the ports and data directory), each in a fresh data
directory. In turn, with nsqd's RSS read after each step:

0. (baseline: a daemon of its own in an empty data directory, started and killed;)
1. --topics idle topics with --channels channels each, and --busy-topics topics with one channel
   each, from nsqd.dat: written into the data directory before the daemon starts, as a restart
   finds them (creating them over HTTP took Go's nsqd over 20 minutes for 8,400 topics: it rewrites
   and fsyncs nsqd.dat for every topic and channel it creates);
2. --messages messages of --size bytes, MPUB over TCP into the busy topics, each into its
   one channel, which nobody consumes: --messages / --busy-topics a channel, which must fit in
   --mem-queue-size (10,000, NSQ's default), so every message stays in memory. Not all in one
   channel with a --mem-queue-size above --messages: Go's nsqd makes every topic's and channel's
   memory queue a Go channel of --mem-queue-size pointers, which its collector scans, so at
   1,000,001 its RSS passed 9 GB with the idle topics;
3. --consumers idle consumers, connected (in 2 processes), IDENTIFYed with the default 30 s
   heartbeat, subscribed to the idle topics' first channels in turn, RDY 1, answering heartbeats:
   ready for a message that never comes.

Then it waits for quiet (nsqd's CPU under QUIET_SHARE of a core over QUIET_SPAN, at most
QUIET_LIMIT), and watches for --window: nsqd's idle CPU (utime + stime from /proc/<pid>/stat) over
the window, how often it went to sleep and woke (the voluntary context switches of all its threads,
each a wait for a timer or a socket that ended), its RSS (VmRSS) and PSS (smaps_rollup) at the window's end. Each round is logged to
stderr as it ends; stdout gets a Markdown table of the medians, ours/Go, with the cost of each step
(bytes per message, per topic or channel, per consumer, from the RSS the step added) and the load
average. The daemons are killed at the end of a round (a graceful stop would write every message
to disk). --quick: a small scene and a 2 s window, for the smoke test.
"""

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_many_consumers import start_consumers  # noqa: E402
from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import OURS, Started, cpu_seconds, rss_kib, start_nsqd  # noqa: E402
from bench.side_by_side import load_average  # noqa: E402
from common.commands import Mpub  # noqa: E402
from common.goflags import parse_duration  # noqa: E402
from nsqd import metadata  # noqa: E402
from tests.go_nsq import go_program, missing_reason  # noqa: E402



class Daemon(NamedTuple):
    name: str
    command: tuple[str, ...]
    root: Path = ROOT  # the checkout whose nsqd runs, when it is ours


DAEMONS = (Daemon("Go", (go_program("nsqd"),)), Daemon("ours", OURS))
BUSY_CHANNEL = "backlog"
IDLE_CHANNEL = "ch"  # the first idle channel of each topic is "ch" (bench_many_consumers subscribes to it)
HEARTBEAT_MS = 30_000  # the default heartbeat interval, said explicitly
CONSUMER_PROCESSES = 2
MPUB_BATCH = 1000
QUIET_SHARE, QUIET_SPAN, QUIET_LIMIT, QUIET_POLL = 0.05, 2.0, 30.0, 0.5
SETTLE = 1.0  # after each step, before its RSS is read
COLUMN_TITLES = {"Go": "Go nsqd v1.3.0", "ours": "this nsqd", "before": "this nsqd before"}
QUICK = {"messages": 20_000, "busy_topics": 2, "topics": 200, "consumers": 100, "window": "2s", "rounds": 1}


class Scene(NamedTuple):
    messages: int
    size: int
    busy_topics: int
    mem_queue_size: int
    topics: int
    channels: int
    consumers: int
    window: float


class Round(NamedTuple):
    baseline_kib: int
    topics_kib: int  # after the idle topics and channels
    messages_kib: int  # after the messages too
    consumers_kib: int  # after the consumers too
    rss_kib: int  # at the end of the idle window
    pss_kib: int
    idle_cpu_share: float  # of one core, over the window
    wakeups_per_second: float  # voluntary context switches over the window, all threads
    quiet_after: float  # seconds from the last consumer's SUB until quiet


def idle_channel(index: int) -> str:
    return IDLE_CHANNEL if index == 0 else f"{IDLE_CHANNEL}{index}"


def idle_topic(index: int) -> str:
    return f"idle{index:05d}"


def busy_topic(index: int) -> str:
    return f"busy{index:03d}"


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError("no Pss")


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far: its waits that ended."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended
            continue
        total += int(status.split("\nvoluntary_ctxt_switches:", 1)[1].split()[0])
    return total


def write_topics(data_path: str, scene: Scene) -> None:
    """nsqd.dat with the idle topics and the busy ones, and their channels, none paused."""
    def topic(name: str, channels: list[str]) -> metadata.TopicMeta:
        return metadata.TopicMeta(name, False, [metadata.ChannelMeta(channel, False) for channel in channels])

    topics = [topic(idle_topic(t), [idle_channel(c) for c in range(scene.channels)]) for t in range(scene.topics)]
    topics += [topic(busy_topic(b), [BUSY_CHANNEL]) for b in range(scene.busy_topics)]
    Path(data_path, metadata.METADATA_FILE).write_bytes(metadata.encode(topics))


def publish(tcp_address: str, scene: Scene) -> None:
    """The messages, in MPUBs of up to MPUB_BATCH, an equal share (give or take one) to each busy topic."""
    producer = BenchConnection(tcp_address)
    try:
        for index in range(scene.busy_topics):
            share = scene.messages // scene.busy_topics + (index < scene.messages % scene.busy_topics)
            for start in range(0, share, MPUB_BATCH):
                count = min(MPUB_BATCH, share - start)
                producer.send(Mpub(busy_topic(index), [b"m" * scene.size] * count).to_bytes())
                producer.read_response()
    finally:
        producer.close()


def settled_rss(pid: int) -> int:
    time.sleep(SETTLE)
    return rss_kib(pid)


def wait_for_quiet(pid: int) -> float:
    """Seconds until nsqd used under QUIET_SHARE of a core over the last QUIET_SPAN (or QUIET_LIMIT)."""
    started = time.monotonic()
    samples = [(started, cpu_seconds(pid))]
    while time.monotonic() - started < QUIET_LIMIT:
        time.sleep(QUIET_POLL)
        samples.append((time.monotonic(), cpu_seconds(pid)))
        (t1, cpu1) = samples[-1]
        older = [sample for sample in samples if sample[0] <= t1 - QUIET_SPAN]
        if older and cpu1 - older[-1][1] < QUIET_SHARE * (t1 - older[-1][0]):
            return t1 - started
    return time.monotonic() - started


def started(daemon: Daemon, data_path: str, scene: Scene) -> Started:
    return start_nsqd(f"--data-path={data_path}",
                      f"--mem-queue-size={scene.mem_queue_size}", command=daemon.command, root=daemon.root)


def baseline_rss(daemon: Daemon, scene: Scene) -> int:
    """The RSS of the daemon started in an empty data directory."""
    with tempfile.TemporaryDirectory(prefix="nsqd-scale-") as data_path:
        proc, _, _ = started(daemon, data_path, scene)
        try:
            return settled_rss(proc.pid)
        finally:
            proc.kill()
            proc.wait(timeout=60)


def one_round(daemon: Daemon, scene: Scene) -> Round:
    baseline = baseline_rss(daemon, scene)
    with tempfile.TemporaryDirectory(prefix="nsqd-scale-") as data_path:
        write_topics(data_path, scene)
        proc, tcp_address, _ = started(daemon, data_path, scene)
        stop = multiprocessing.Event()
        results = multiprocessing.Queue()
        workers = []
        try:
            wait_for_quiet(proc.pid)
            topics_kib = settled_rss(proc.pid)
            publish(tcp_address, scene)
            messages_kib = settled_rss(proc.pid)
            subscribed = [idle_topic(t) for t in range(min(scene.topics, scene.consumers))]
            workers = start_consumers(tcp_address, subscribed, scene.consumers, CONSUMER_PROCESSES, HEARTBEAT_MS,
                                      stop, results)
            consumers_kib = settled_rss(proc.pid)
            quiet_after = wait_for_quiet(proc.pid)
            cpu0, switches0, t0 = cpu_seconds(proc.pid), voluntary_switches(proc.pid), time.monotonic()
            time.sleep(scene.window)
            cpu1, switches1, t1 = cpu_seconds(proc.pid), voluntary_switches(proc.pid), time.monotonic()
            rss, pss = rss_kib(proc.pid), pss_kib(proc.pid)
            if proc.poll() is not None:
                raise RuntimeError(f"{daemon.name}'s nsqd exited with {proc.returncode}")
        finally:
            stop.set()
            # each consumer process closes its connections and reports before nsqd is killed: a
            # connection nsqd's death closed first would count as one lost while idle
            counts = [results.get(timeout=60) for _ in workers]
            proc.kill()
            proc.wait(timeout=60)
            for worker in workers:
                worker.join(timeout=30)
    lost = sum(count["lost"] for count in counts)
    if lost:
        raise RuntimeError(f"{lost} consumers were disconnected while idle")
    return Round(baseline, topics_kib, messages_kib, consumers_kib, rss, pss, (cpu1 - cpu0) / (t1 - t0),
                 (switches1 - switches0) / (t1 - t0), quiet_after)


def round_text(result: Round, scene: Scene) -> str:
    costs = step_costs(result, scene)
    return (f"RSS {result.rss_kib / 1024:.1f} MiB, PSS {result.pss_kib / 1024:.1f} MiB, idle CPU "
            f"{result.idle_cpu_share * 100:.2f}% of a core, {result.wakeups_per_second:.0f} wake-ups/s (quiet after "
            f"{result.quiet_after:.1f}s); baseline "
            f"{result.baseline_kib / 1024:.1f} MiB, per topic or channel {costs[0]:,.0f} B, per message "
            f"{costs[1]:,.0f} B, per consumer {costs[2]:,.0f} B")


def step_costs(result: Round, scene: Scene) -> tuple[float, float, float]:
    """Bytes of RSS each step added, per topic or channel, per message, per consumer."""
    objects = scene.topics * (1 + scene.channels) + scene.busy_topics * 2
    return (per((result.topics_kib - result.baseline_kib) * 1024, objects),
            per((result.messages_kib - result.topics_kib) * 1024, scene.messages),
            per((result.consumers_kib - result.messages_kib) * 1024, scene.consumers))


def per(total: float, count: int) -> float:
    """``total`` per one of ``count``; 0 when there are none (a scene with --consumers=0)."""
    return total / count if count else 0.0


def median_row(rounds: list[Round], scene: Scene) -> dict[str, float]:
    costs = [step_costs(result, scene) for result in rounds]
    return {
        "RSS, MiB": statistics.median(result.rss_kib for result in rounds) / 1024,
        "PSS, MiB": statistics.median(result.pss_kib for result in rounds) / 1024,
        "idle CPU, % of a core": statistics.median(result.idle_cpu_share for result in rounds) * 100,
        "idle wake-ups, per s": statistics.median(result.wakeups_per_second for result in rounds),
        "baseline RSS, MiB": statistics.median(result.baseline_kib for result in rounds) / 1024,
        "RSS per idle topic or channel, B": statistics.median(cost[0] for cost in costs),
        "RSS per queued message, B": statistics.median(cost[1] for cost in costs),
        "RSS per idle consumer, B": statistics.median(cost[2] for cost in costs),
    }


def report(command_line: str, scene: Scene, rounds: dict[str, list[Round]], loads: tuple[float, float]) -> str:
    """The medians of each daemon, ours / Go, and ours / before when --before gave one."""
    rows = {name: median_row(results, scene) for name, results in rounds.items()}
    versus = [name for name in ("Go", "before") if name in rows]
    lines = [f"`{command_line}` on {len(rounds['Go'])} round(s), load average {loads[0]:.2f} -> {loads[1]:.2f}: "
             f"{scene.messages:,} queued {scene.size}-byte messages in {scene.busy_topics} topics (`--mem-queue-size="
             f"{scene.mem_queue_size}`), {scene.topics:,} idle topics x "
             f"{scene.channels} channels, {scene.consumers:,} idle consumers (RDY 1), idle window "
             f"{scene.window:g}s; medians", "",
             "| figure | " + " | ".join(COLUMN_TITLES[name] for name in rows) + " | "
             + " | ".join(f"ours / {name}" for name in versus) + " |",
             "|---" * (1 + len(rows) + len(versus)) + "|"]
    for figure in rows["Go"]:
        values = [f"{row[figure]:,.2f}" for row in rows.values()]
        ratios = [ratio(rows["ours"][figure], rows[name][figure]) for name in versus]
        lines.append(f"| {figure} | " + " | ".join(values + ratios) + " |")
    return "\n".join(lines)


def ratio(ours: float, other: float) -> str:
    return f"{ours / other:.2f}" if other > 0 else "-"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--busy-topics", type=int, default=100, help="the topics the messages are shared among")
    parser.add_argument("--mem-queue-size", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=5_000)
    parser.add_argument("--window", default="30s", help="how long nsqd is watched idle")
    parser.add_argument("--quick", action="store_true", help="a small scene and a 2 s window (smoke test)")
    parser.add_argument("--before", type=Path, help="also the nsqd of this checkout (e.g. main's, before a change)")
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            if parser.get_default(name) == getattr(args, name):
                setattr(args, name, value)
    if -(-args.messages // args.busy_topics) > args.mem_queue_size:
        parser.error("--messages / --busy-topics must fit in --mem-queue-size (every message in memory)")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    reason = missing_reason()
    if reason is not None:
        sys.exit(reason)
    scene = Scene(args.messages, args.size, args.busy_topics, args.mem_queue_size, args.topics, args.channels,
                  args.consumers, parse_duration(args.window))
    before = load_average()
    daemons = DAEMONS + ((Daemon("before", OURS, args.before.resolve()),) if args.before else ())
    rounds: dict[str, list[Round]] = {daemon.name: [] for daemon in daemons}
    for number in range(1, args.rounds + 1):
        for daemon in daemons:
            rounds[daemon.name].append(one_round(daemon, scene))
            print(f"round {number}, {daemon.name}: {round_text(rounds[daemon.name][-1], scene)}", file=sys.stderr,
                  flush=True)
    print(report(" ".join(["python bench/bench_scale.py", *argv]), scene, rounds, (before, load_average())))


if __name__ == "__main__":
    main(sys.argv[1:])
