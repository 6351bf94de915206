"""Runs a cluster's daemons as child processes and streams their logs, as ``docker compose up`` does.

Theory of operation. Each daemon runs in a session of its own (``start_new_session``), so a
terminal's Ctrl-C reaches the launcher alone: the launcher decides when and in which order the
daemons stop, and signals each of them once (SIGTERM; SIGKILL only past a deadline or on a
second Ctrl-C). One thread waits on one selector holding every daemon's output pipe (stdout
and stderr together) and the signal wakeup fd:

- a line of output is written out behind the daemon's label (``nsqd-1     | ...``) and scanned
  for ``TCP: listening on ADDR`` / ``HTTP: listening on ADDR``: that is how the launcher learns
  the addresses when the system picks the ports;
- the end of a daemon's output means it has exited (no one else holds its pipe): it is reaped
  and reported at once, with its exit status;
- a signal arrives as its number on the wakeup fd (its Python handler does nothing), so it
  wakes the loop like any other event.

Should the launcher itself be killed (SIGKILL cannot be caught), Linux sends each daemon SIGTERM
(prctl PR_SET_PDEATHSIG), so they stop as they would on Ctrl-C rather than run on as orphans.
"""

import ctypes
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO, Callable

from .local_cluster import Daemon

LAUNCHER = "launcher"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
LISTENING = re.compile(rb"\b(TCP|HTTP): listening on (\S+)")
REAP_SECONDS = 10.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def describe_status(status: int) -> str:
    """``exit status 1`` or ``killed by SIGKILL``, from a Popen return code."""
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def _terminate_with_parent(launcher_pid: int) -> Callable[[], None] | None:
    """A preexec_fn that has the child get SIGTERM when the launcher dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher_pid:  # the launcher died before prctl took effect: do not start
            os._exit(1)

    return preexec


class Child:
    """A started daemon: its process, the addresses it reported, its exit status once reaped."""

    def __init__(self, daemon: Daemon, proc: subprocess.Popen):
        self.daemon = daemon
        self.proc = proc
        self.addresses: dict[str, str] = {}
        self.status: int | None = None
        self.stopping = False
        self.partial_line = b""

    @property
    def label(self) -> str:
        return self.daemon.label

    @property
    def running(self) -> bool:
        return self.status is None

    @property
    def listening(self) -> bool:
        return all(kind in self.addresses for kind in self.daemon.listeners)


class Supervisor:
    """Starts daemons, streams their output, reports their exits, stops them group by group.

    A context manager: on the way out, whatever happened, a daemon still running gets SIGTERM,
    then SIGKILL, and is reaped, so the launcher never leaves a process behind."""

    def __init__(self, labels: list[str], out: BinaryIO, bin_dir: Path):
        self.width = max(map(len, [*labels, LAUNCHER]))
        self.out = out
        self.bin_dir = bin_dir
        self.children: list[Child] = []
        self.signals: list[int] = []
        self.died: list[Child] = []  # exits no one asked for
        self._selector = selectors.DefaultSelector()
        self._wakeup = (-1, -1)
        self._previous_wakeup_fd = -1
        self._previous_handlers: dict[int, object] = {}
        self._muted = False

    def __enter__(self) -> "Supervisor":
        self._wakeup = os.pipe()
        for fd in self._wakeup:
            os.set_blocking(fd, False)
        self._selector.register(self._wakeup[0], selectors.EVENT_READ, None)
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._wakeup[1], warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            self._previous_handlers[signum] = signal.signal(signum, lambda signum, frame: None)
        return self

    def __exit__(self, *exc_info) -> None:
        for child in self.children:
            if child.running:
                self._reap_after_exception(child)
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        self._selector.close()
        for fd in self._wakeup:
            os.close(fd)

    def _reap_after_exception(self, child: Child) -> None:
        child.proc.terminate()
        try:
            child.status = child.proc.wait(REAP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(child.proc.pid, signal.SIGKILL)
            child.status = child.proc.wait()
        self.say(f"{child.label} stopped ({describe_status(child.status)})")

    def start(self, daemon: Daemon) -> Child:
        """Start ``daemon`` (its console script next to this Python); OSError if it cannot run."""
        proc = subprocess.Popen([str(self.bin_dir / daemon.program), *daemon.flags], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=_terminate_with_parent(os.getpid()))
        child = Child(daemon, proc)
        self.children.append(child)
        os.set_blocking(proc.stdout.fileno(), False)
        self._selector.register(proc.stdout.fileno(), selectors.EVENT_READ, child)
        self.say(f"started {daemon.label} (pid {proc.pid}): {daemon.program} {' '.join(daemon.flags)}")
        return child

    def say(self, text: str) -> None:
        """The launcher's own lines, labelled like the daemons'."""
        for line in text.split("\n"):
            self._write(LAUNCHER, line.encode())

    def run_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Stream output, reap and report exits, collect signals until ``done()``; False if
        ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            for key, _ in self._selector.select(remaining):
                if key.data is None:
                    self._take_signals()
                else:
                    self._read_output(key.data)
        return True

    def stop(self, group: list[Child], timeout: float) -> None:
        """SIGTERM, once, to each daemon of ``group`` still running, and wait for them all; SIGKILL
        to those still running after ``timeout`` seconds or when another stop signal comes."""
        running = [child for child in group if child.running]
        if not running:
            return
        self.say("stopping " + ", ".join(child.label for child in running))
        for child in running:
            child.stopping = True
            child.proc.send_signal(signal.SIGTERM)
        signals_before = len(self.signals)
        self.run_until(lambda: not any(child.running for child in running) or len(self.signals) > signals_before,
                       timeout)
        stragglers = [child for child in running if child.running]
        if not stragglers:
            return
        why = "stop signal received again" if len(self.signals) > signals_before else f"not stopped after {timeout:g}s"
        self.say(f"{why}: killing " + ", ".join(child.label for child in stragglers))
        for child in stragglers:
            os.killpg(child.proc.pid, signal.SIGKILL)
        self.run_until(lambda: not any(child.running for child in stragglers), REAP_SECONDS)

    def _take_signals(self) -> None:
        try:
            self.signals.extend(os.read(self._wakeup[0], 512))
        except BlockingIOError:
            pass

    def _read_output(self, child: Child) -> None:
        try:
            data = os.read(child.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        if data:
            *lines, child.partial_line = (child.partial_line + data).split(b"\n")
            for line in lines:
                self._daemon_line(child, line)
            return
        if child.partial_line:
            self._daemon_line(child, child.partial_line)
        self._selector.unregister(child.proc.stdout.fileno())
        child.proc.stdout.close()
        child.status = child.proc.wait()
        if child.stopping:
            self.say(f"{child.label} stopped ({describe_status(child.status)})")
        else:
            self.died.append(child)
            self.say(f"{child.label} died ({describe_status(child.status)})")

    def _daemon_line(self, child: Child, line: bytes) -> None:
        self._write(child.label, line)
        match = LISTENING.search(line)
        if match:
            child.addresses.setdefault(match.group(1).decode(), match.group(2).decode())

    def _write(self, label: str, line: bytes) -> None:
        if self._muted:
            return
        try:
            self.out.write(f"{label:<{self.width}} | ".encode() + line.rstrip(b"\r") + b"\n")
            self.out.flush()
        except (OSError, ValueError):  # no one reads the output any more: supervise on, silently
            self._muted = True
