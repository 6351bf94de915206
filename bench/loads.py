"""The loads the side-by-side benchmark puts on each nsqd: what runs, and what is counted.

A load is nsqd's flags and phases of clients; the clients of a phase start together (from the
same ``--deadline`` when there are several) and the next phase starts when they have all
finished. A client is NSQ's own Go bench_writer or bench_reader (bench/nsq_tools.py) or one of
this project's Python load generators (bench/bench_writer.py, bench_reader.py, bench_pub.py,
bench_http_pub.py). The daemon's CPU and the clients' are counted over the last phase (for the
drain, its reader), and divided by the messages the load counts as its work. The latency load
is bench/bench_latency.py's publisher and consumer, run in this process.
"""

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from bench import go_tools, nsq_tools
from bench.bench_latency import measure as measure_latency
from bench.nsq_socket import BenchConnection
from bench.nsqd_process import cpu_seconds, wait_for_exit
from common.commands import Sub
from common.goflags import format_duration, parse_duration

IN_MEMORY = "--mem-queue-size=100000000"
LATENCY_RATE = 10_000


@dataclass(frozen=True)
class Daemon:
    """An nsqd that is running: its process id and addresses."""

    pid: int
    tcp_address: str
    http_address: str


@dataclass(frozen=True)
class Round:
    """One load on one daemon once: its figures (one, or in and out), the daemon's and the
    clients' CPU seconds per million messages of work, and a remark."""

    figures: tuple[float, ...]
    nsqd_cpu: float
    clients_cpu: float | None
    remark: str = ""


@dataclass(frozen=True)
class Client:
    """One client program with its flags. ``program``: NSQ's ``bench_writer``/``bench_reader``, or
    a Python load generator's file in bench/. ``copies`` run at once, ``{n}`` in a flag being
    each one's number; ``gomaxprocs`` sets a Go tool's connections."""

    program: str
    flags: tuple[str, ...]
    gomaxprocs: int | None = None
    copies: int = 1
    over_http: bool = False

    @property
    def is_go(self) -> bool:
        return not self.program.endswith(".py")

    def command(self) -> str:
        """How the README shows it: without the address and deadline every client is given."""
        env = f"GOMAXPROCS={self.gomaxprocs} " if self.gomaxprocs else ""
        program = self.program if self.is_go else f"bench/{self.program}"
        text = f"`{env}{program} {' '.join(self.flags)}`"
        return f"{text} for n = 0..{self.copies - 1}" if self.copies > 1 else text

    def start(self, daemon: Daemon, deadline: str) -> list[subprocess.Popen]:
        timing = (f"--deadline={deadline}",) if deadline else ()
        started = []
        for n in range(self.copies):
            flags = (*(flag.replace("{n}", str(n)) for flag in self.flags), *timing)
            if self.is_go:
                started.append(nsq_tools.start(self.program, daemon.tcp_address, *flags, gomaxprocs=self.gomaxprocs))
            else:
                address = (f"--nsqd-http-address={daemon.http_address}" if self.over_http
                           else f"--nsqd-tcp-address={daemon.tcp_address}")
                started.append(go_tools.start_tool(self.program, address, *flags))
        return started

    def finish(self, started: list[subprocess.Popen]) -> list[nsq_tools.ToolRun]:
        return [nsq_tools.finish(proc) if self.is_go else _finish_python(proc) for proc in started]


_PYTHON_RATE = re.compile(r"([\d.]+)(?:ops|req)/s")
_PYTHON_COUNT = re.compile(r"(\d+) (?:msgs -|requests)")


def _finish_python(proc: subprocess.Popen) -> nsq_tools.ToolRun:
    """A Python load generator's figures: its rate (ops/s or req/s) and its count (msgs or requests)."""
    out = proc.stdout.read()
    cpu = wait_for_exit(proc)
    rate, count = _PYTHON_RATE.search(out), _PYTHON_COUNT.search(out)
    if proc.returncode or not rate or not count:
        raise RuntimeError(f"{proc.args[1]} failed ({proc.returncode}):\n{out}")
    return nsq_tools.ToolRun(float(rate.group(1)), int(count.group(1)), cpu)


@dataclass(frozen=True)
class Load:
    """``phases`` of clients against an nsqd started with ``flags``; ``count`` turns the last
    phase's runs (a list per client, one run per copy) into its figures (one, or in and out) and
    the messages of work. ``prepare`` readies the fresh daemon (makes channels); ``remark`` says
    more of a round (what ``remark_label`` names), from the earlier phases' runs and the last's."""

    key: str
    title: str
    flags: tuple[str, ...]
    phases: tuple[tuple[Client, ...], ...]
    count: Callable[[list], tuple[tuple[float, ...], int]]
    unit: str = "msgs/s"
    prepare: Callable[[Daemon], None] | None = None
    remark: Callable[[list, list], str] | None = None
    remark_label: str = ""
    replica: bool = False

    def commands(self) -> str:
        nsqd = f"`nsqd {' '.join(self.flags)}`" if self.flags else "`nsqd`"
        phases = []
        for clients in self.phases:
            text = " and ".join(client.command() for client in clients)
            together = len(clients) > 1 or clients[0].copies > 1
            phases.append(text + (", from the same `--deadline`" if together else ""))
        return f"{nsqd}; " + ", then ".join(phases)

    def run(self, daemon: Daemon) -> Round:
        if self.prepare:
            self.prepare(daemon)
        earlier = [self._run_phase(daemon, clients) for clients in self.phases[:-1]]
        before = cpu_seconds(daemon.pid)
        last = self._run_phase(daemon, self.phases[-1])
        nsqd_cpu = cpu_seconds(daemon.pid) - before
        figures, work = self.count(last)
        clients_cpu = sum(run.cpu for runs in last for run in runs)
        remark = self.remark(earlier, last) if self.remark else ""
        return Round(figures, nsqd_cpu * 1e6 / work, clients_cpu * 1e6 / work, remark)

    @staticmethod
    def _run_phase(daemon: Daemon, clients: tuple[Client, ...]) -> list[list[nsq_tools.ToolRun]]:
        """Every client's runs, one per copy."""
        together = sum(client.copies for client in clients) > 1
        deadline = go_tools.deadline_in(1) if together else ""
        started: list[list[subprocess.Popen]] = []
        try:
            for client in clients:
                started.append(client.start(daemon, deadline))
            return [client.finish(procs) for client, procs in zip(clients, started)]
        except BaseException:
            for proc in (proc for procs in started for proc in procs if proc.returncode is None):
                proc.kill()
                proc.wait()
            raise


@dataclass(frozen=True)
class LatencyLoad:
    """bench/bench_latency.py's steady publisher and its consumer, in this process."""

    key: str
    title: str
    runfor: str
    flags: tuple[str, ...] = ()
    unit: str = "ms"
    remark_label: str = "p50 / p99.9 / max, ms"
    replica: bool = True

    def commands(self) -> str:
        return (f"`nsqd`; the publisher and consumer of `bench/bench_latency.py`, {LATENCY_RATE:,} msgs/s for "
                f"{self.runfor}")

    def run(self, daemon: Daemon) -> Round:
        stats, cpu_per_message = measure_latency(daemon.pid, daemon.tcp_address, LATENCY_RATE,
                                                 parse_duration(self.runfor))
        remark = f"{stats['p50']:.3g} / {stats['p99.9']:.3g} / {stats['max']:.3g}"
        return Round((stats["p99"],), cpu_per_message, None, remark)


def _only(runs) -> tuple[tuple[float, ...], int]:
    """One client, one figure: its rate, per its messages."""
    [[run]] = runs
    return (run.rate,), run.messages


def _in_out(runs) -> tuple[tuple[float, ...], int]:
    """A reader and a writer: the writer's rate in, the reader's out, per message published."""
    [[reader], [writer]] = runs
    return (writer.rate, reader.rate), writer.messages


def _slowest_channel(runs) -> tuple[tuple[float, ...], int]:
    """A writer and a reader per channel: in, the slowest channel out, per message delivered."""
    [[writer], readers] = runs
    return (writer.rate, min(reader.rate for reader in readers)), sum(reader.messages for reader in readers)


def _backlog(earlier, runs) -> str:
    [[[writer]]], [[reader]] = earlier, runs
    emptied = " (emptied: the rate is a lower bound)" if reader.messages >= writer.messages else ""
    return f"{writer.messages:,}{emptied}"


def _channel_maker(count: int):
    def make_channels(daemon: Daemon) -> None:
        """A SUB that leaves: the channel stays, so it gets every message from the first."""
        for n in range(count):
            conn = BenchConnection(daemon.tcp_address)
            conn.send(Sub("sub_bench", f"ch{n}").to_bytes())
            conn.read_response()
            conn.close()
    return make_channels


def nsq_tool_loads(runfor: str, channels: int, consumers: int) -> list[Load]:
    """The headline loads: NSQ's own bench_writer and bench_reader."""
    writer = Client("bench_writer", (f"--runfor={runfor}",))
    reader = Client("bench_reader", (f"--runfor={runfor}",))
    backlog_writer = Client("bench_writer", (f"--runfor={format_duration(2 * parse_duration(runfor))}",))
    return [
        Load("publish", "publish only, every message kept in memory", (IN_MEMORY,), ((writer,),), _only),
        Load("pubsub", "publish and consume at once, default flags (in / out)", (), ((reader, writer),), _in_out),
        Load("pubsub-mem0", "the same with every message through the disk queue (in / out)",
             ("--mem-queue-size=0",), ((reader, writer),), _in_out),
        Load("drain", "drain a disk backlog: publish into a topic with no channel, then consume (out; CPU while "
             "draining)", (),
             ((backlog_writer,), (reader,)), _only, remark=_backlog, remark_label="the backlog, messages"),
        Load("channels", f"{channels} channels, made first, one consumer each (in / slowest channel out; CPU per "
             "million delivered)", (), ((writer, Client("bench_reader", (f"--runfor={runfor}", "--channel=ch{n}"),
                                                  gomaxprocs=1, copies=channels)),),
             _slowest_channel, prepare=_channel_maker(channels)),
        Load("consumers", f"{consumers} consumers on one channel (in / out)", (),
             ((Client("bench_reader", (f"--runfor={runfor}",), gomaxprocs=consumers), writer),), _in_out),
    ]


def replica_loads(runfor: str) -> list[Load | LatencyLoad]:
    """The extra loads: what NSQ's tools cannot do, and the Python replicas of NSQ's tools."""
    writer = Client("bench_writer.py", (f"--runfor={runfor}",))
    reader = Client("bench_reader.py", (f"--runfor={runfor}",))
    connections = nsq_tools.connections()
    as_nsq = tuple(Client(client.program, (*client.flags, f"--connections={connections}"))
                   for client in (reader, writer))
    return [
        Load("replica-publish", "publish only, in memory, with the Python replica of bench_writer (1 connection)",
             (IN_MEMORY,), ((writer,),), _only, replica=True),
        Load("replica-pubsub", "publish and consume at once, default flags, with the Python replicas (1 connection "
             "each; in / out)", (), ((reader, writer),), _in_out, replica=True),
        Load("replica-pubsub-as-nsq", f"the same with {connections} connections each, as NSQ's tools open here "
             "(in / out)", (), (as_nsq,), _in_out, replica=True),
        Load("pub16", "`PUB`, one message at a time on 16 connections (past 10,000 queued, each a disk write)", (),
             ((Client("bench_pub.py", (f"--runfor={runfor}", "--connections=16")),),), _only, replica=True),
        Load("http-pub", "`POST /pub`, one message a request, 4 keep-alive connections", (),
             ((Client("bench_http_pub.py", (f"--runfor={runfor}", "--connections=4"), over_http=True),),),
             _only, unit="requests/s", replica=True),
        LatencyLoad("latency", f"p99 publish-to-delivery latency at a steady {LATENCY_RATE:,} msgs/s "
                    "(lower is better)", runfor),
    ]
