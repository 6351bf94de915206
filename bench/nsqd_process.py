"""Start an nsqd (this project's, or any command that logs as NSQ's does) on loopback ports the
kernel picks for a benchmark, and read its RSS and CPU."""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
OURS = (sys.executable, "-m", "nsqd")
_TEMP_DIRS: list[tempfile.TemporaryDirectory] = []


def _temp_dir() -> str:
    _TEMP_DIRS.append(tempfile.TemporaryDirectory(prefix="nsqd-bench-"))
    return _TEMP_DIRS[-1].name


def _drain(stream) -> None:
    for _ in stream:
        pass


class Started(NamedTuple):
    proc: subprocess.Popen
    tcp_address: str
    http_address: str  # "" with --http-address= (no HTTP listener)


def start_nsqd(*args: str, prefix: tuple[str, ...] = (), root: Path = ROOT,
               command: tuple[str, ...] = OURS) -> Started:
    """The process and the addresses it logged it listens on; its log is read (and dropped) so it
    never blocks.

    Unless ``args`` say otherwise, HTTP listens on a port the kernel picks (one picked free
    beforehand can be taken by the time nsqd binds it, and nsqd then exits after logging its TCP
    listener) and the data directory is a new temporary one, removed when the benchmark process
    exits. ``prefix`` runs nsqd under another program (valgrind); ``root`` is the checkout whose
    nsqd runs; ``command`` is the nsqd to run (NSQ's Go nsqd logs its listeners as ours does, in
    either order)."""
    given = dict(arg.split("=", 1) for arg in args if "=" in arg)
    defaults = {"--http-address": "127.0.0.1:0"} | ({} if "--data-path" in given else {"--data-path": _temp_dir()})
    flags = [f"{name}={value}" for name, value in defaults.items() if name not in given]
    wanted = {"TCP", "HTTP"} if given.get("--http-address", defaults.get("--http-address")) else {"TCP"}
    proc = subprocess.Popen([*prefix, *command, "--tcp-address=127.0.0.1:0", *flags, *args],
                            cwd=root, stderr=subprocess.PIPE, text=True)
    listening = logged_listeners(proc, wanted)
    return Started(proc, listening["TCP"], listening.get("HTTP", ""))


def logged_listeners(proc: subprocess.Popen, wanted: set[str]) -> dict[str, str]:
    """The loopback addresses ``proc`` (an NSQ daemon, Go's or ours, its stderr a text pipe) logs
    it listens on, by protocol, once it has logged every one of ``wanted``; the rest of its log is
    then read and dropped so it never blocks."""
    listening: dict[str, str] = {}
    for line in proc.stderr:
        match = re.search(r"\b(TCP|HTTP): listening on (127\.0\.0\.1:\d+)", line)
        if match:
            listening[match.group(1)] = match.group(2)
            if wanted <= listening.keys():
                threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
                return listening
    raise RuntimeError(f"{proc.args[0]} did not start (exit code {proc.wait()}); it logged {sorted(listening)} listeners")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS: process {pid} has exited")


@contextlib.contextmanager
def running_nsqd(*args: str, command: tuple[str, ...] = OURS, root: Path = ROOT):
    """A fresh nsqd in a fresh data directory for one run: (process, TCP address, HTTP address);
    terminated afterwards and its data directory removed (a run may leave gigabytes).
    ``root``: the checkout whose nsqd ``command`` runs, when it is ours."""
    with tempfile.TemporaryDirectory(prefix="nsqd-bench-") as data_path:
        started = start_nsqd(f"--data-path={data_path}", *args, command=command, root=root)
        try:
            yield started
        finally:
            started.proc.terminate()
            started.proc.wait(timeout=60)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU seconds so far (every thread of it, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime, in clock ticks


def wait_for_exit(proc: subprocess.Popen) -> float:
    """Wait for ``proc`` to end (its output already read); its CPU seconds, user + system, with
    those of the children it waited for (wait4's accounting)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime
