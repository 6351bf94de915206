"""Start an nsqd (this project's, or any command that logs as NSQ's does) on a free loopback
port for a benchmark, and read its RSS and CPU."""

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = (sys.executable, "-m", "nsqd")
_TEMP_DIRS: list[tempfile.TemporaryDirectory] = []


def _temp_dir() -> str:
    _TEMP_DIRS.append(tempfile.TemporaryDirectory(prefix="nsqd-bench-"))
    return _TEMP_DIRS[-1].name


def _drain(stream) -> None:
    for _ in stream:
        pass


def start_nsqd(*args: str, prefix: tuple[str, ...] = (), root: Path = ROOT,
               command: tuple[str, ...] = OURS) -> tuple[subprocess.Popen, str]:
    """The process and its TCP address; its log is read (and dropped) so it never blocks.

    Unless ``args`` say otherwise, HTTP listens on a free loopback port and the data
    directory is a new temporary one, removed when the benchmark process exits. ``prefix``
    runs nsqd under another program (valgrind); ``root`` is the checkout whose nsqd runs;
    ``command`` is the nsqd to run (NSQ's Go nsqd logs its listeners as ours does)."""
    given = {arg.split("=", 1)[0] for arg in args}
    defaults = {"--http-address": "127.0.0.1:0"} | ({} if "--data-path" in given else {"--data-path": _temp_dir()})
    flags = [f"{name}={value}" for name, value in defaults.items() if name not in given]
    proc = subprocess.Popen([*prefix, *command, "--tcp-address=127.0.0.1:0", *flags, *args],
                            cwd=root, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        match = re.search(r"TCP: listening on (127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return proc, match.group(1)
    raise RuntimeError("nsqd did not start")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS: process {pid} has exited")


@contextlib.contextmanager
def running_nsqd(*args: str, command: tuple[str, ...] = OURS, root: Path = ROOT):
    """A fresh nsqd in a fresh data directory for one run: (process, TCP address);
    terminated afterwards and its data directory removed (a run may leave gigabytes).
    ``root``: the checkout whose nsqd ``command`` runs, when it is ours."""
    with tempfile.TemporaryDirectory(prefix="nsqd-bench-") as data_path:
        proc, address = start_nsqd(f"--data-path={data_path}", *args, command=command, root=root)
        try:
            yield proc, address
        finally:
            proc.terminate()
            proc.wait(timeout=60)


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
