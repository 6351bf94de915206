"""NSQ v1.3.0's own benchmark clients, bench_writer and bench_reader (Go), run as they are.

They are found where the tests find NSQ's programs (tests/go_nsq.py: beside the project, or in
``$NSQ_GO_BIN_DIR``). What they do (nsqio/nsq bench/bench_writer, bench/bench_reader at v1.3.0):
each opens ``runtime.GOMAXPROCS(0)`` connections (the CPUs it may run on, unless the ``GOMAXPROCS``
variable says otherwise), sends IDENTIFY (the reader its SUB too, buffered) on each, waits for
``--deadline`` (read as UTC) and then, on every connection at once:

- bench_writer: an MPUB of ``--batch-size`` bodies of ``--size`` bytes, flushed, its answer
  awaited, again until ``--runfor`` has passed;
- bench_reader: RDY ``--rdy``, then a FIN for each message into a 4096-byte bufio.Writer that
  goes out when full, after each FIN once ``count % rdy > rdy * 0.75`` (a write per FIN for the
  last quarter of each RDY window), and every second; it reads through a 4096-byte bufio.Reader
  and closes the connection after ``--runfor``.

Each logs one line to stderr, ``[bench_writer] 2026/11/26 15:55:27 duration: 2.000922733s -
202.048mb/s - 1059311.269ops/s - 0.944us/op``: the messages over the time from the start until
the last connection finished.
"""

import os
import re
import subprocess
from dataclasses import dataclass

from bench.nsqd_process import wait_for_exit
from common.goflags import parse_duration
from tests.go_nsq import go_program

_RESULT = re.compile(r"duration: (\S+) - [\d.]+mb/s - ([\d.]+)ops/s")


@dataclass(frozen=True)
class ToolRun:
    rate: float  # messages/s, the tool's own figure
    messages: int  # how many it published or received
    cpu: float  # the tool's CPU seconds, user + system


def connections(gomaxprocs: int | None = None) -> int:
    """How many connections a tool opens: GOMAXPROCS, by default the CPUs this process may use."""
    return gomaxprocs or int(os.environ.get("GOMAXPROCS") or len(os.sched_getaffinity(0)))


def start(name: str, address: str, *flags: str, gomaxprocs: int | None = None) -> subprocess.Popen:
    """``name`` (bench_writer or bench_reader) against the nsqd at ``address``; ``gomaxprocs``
    sets its connections."""
    env = os.environ | ({"GOMAXPROCS": str(gomaxprocs)} if gomaxprocs else {})
    return subprocess.Popen([go_program(name), f"--nsqd-tcp-address={address}", *flags], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(tool: subprocess.Popen) -> ToolRun:
    """Wait for the tool; its figures from its result line."""
    log = tool.stderr.read()
    cpu = wait_for_exit(tool)
    match = _RESULT.search(log)
    if tool.returncode or not match:
        raise RuntimeError(f"{tool.args[0]} failed ({tool.returncode}):\n{log}")
    rate = float(match.group(2))
    return ToolRun(rate, round(rate * parse_duration(match.group(1))), cpu)
