"""NSQ v1.3.0's own programs (Go), the reference this project is measured against.

They are linux/amd64 binaries that live beside the project, not in it: at
``../shared/tools/nsq-v1.3.0-linux-amd64/`` from the project root, or wherever ``NSQ_GO_BIN_DIR``
points. Where they are absent (a user's clone) every test that needs them skips with one line
saying why, so ``make test`` still passes; CI has them, so there they run.

The Go daemons log their listeners as ours do (``TCP: listening on 127.0.0.1:PORT``), so they
run under the same process helpers, with the same attributes (``tcp_port``, ``http_port``, ...).
"""

import os
import platform
import re
import signal
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, DaemonProcess, NsqdProcess
from .lookupd_helpers import LookupdProcess

GO_BIN_DIR = Path(os.environ.get("NSQ_GO_BIN_DIR") or ROOT.parent / "shared" / "tools" / "nsq-v1.3.0-linux-amd64")


def missing_reason() -> str | None:
    """Why NSQ's binaries cannot run here, or None when they can."""
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        return f"NSQ v1.3.0's reference binaries are linux/amd64, this is {platform.system()}/{platform.machine()}"
    if not (GO_BIN_DIR / "nsqd").is_file():
        return f"NSQ v1.3.0's binaries are not in {GO_BIN_DIR} (set NSQ_GO_BIN_DIR to their folder)"
    return None


requires_go = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


def go_program(name: str) -> str:
    """The path of one of NSQ's programs (nsqd, nsq_tail, bench_writer, ...)."""
    return str(GO_BIN_DIR / name)


def go_daemon(name: str) -> list[str]:
    """The command that runs one of NSQ's daemons with SIGINT ignored until it handles it.

    NSQ's daemons listen before they handle a stop signal (apps/nsqd/main.go: Start runs Main, which
    listens, in a goroutine and returns; only then does svc.Run call signal.Notify(SIGINT, SIGTERM)),
    so a SIGTERM sent as soon as a port answers may find no handler and kill the daemon (-15)
    before its graceful stop. Go keeps an inherited SIG_IGN for SIGINT until signal.Notify asks
    for it: a SIGINT sent too early is lost, not fatal, and ``stop_gracefully`` sends another."""
    return ["/bin/sh", "-c", 'trap "" INT; exec "$0" "$@"', go_program(name)]


def stop_gracefully(proc: subprocess.Popen, timeout: float = 15.0) -> int:
    """SIGINT (NSQ's daemons stop on it as on SIGTERM) until ``proc`` exits; its exit code."""
    for _ in range(int(timeout / 0.2)):
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait(timeout=0.2)


class GoDaemon:
    """Stops NSQ's daemon (started with ``go_daemon``) gracefully however early: see ``go_daemon``."""

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if signum == signal.SIGTERM and self.proc.poll() is None:
            stop_gracefully(self.proc)
        return super().stop(signum)


class GoNsqdProcess(GoDaemon, NsqdProcess):
    """NSQ's nsqd on ephemeral loopback ports."""

    command = go_daemon("nsqd")


class GoLookupdProcess(GoDaemon, LookupdProcess):
    """NSQ's nsqlookupd on ephemeral loopback ports."""

    command = go_daemon("nsqlookupd")


class GoAdminProcess(GoDaemon, DaemonProcess):
    """NSQ's nsqadmin on an ephemeral loopback port."""

    def __init__(self, *args: str):
        super().__init__("nsqadmin", ["--http-address=127.0.0.1:0", *args], ("HTTP",), go_daemon("nsqadmin"))
        self.http_port = self.ports["HTTP"]
        self.url = f"http://127.0.0.1:{self.http_port}"


def usage_by_flag(text: str) -> dict[str, str]:
    """A ``-h`` usage (Go's PrintDefaults) cut into each flag's lines, by flag name."""
    blocks: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        if line.startswith("  -"):
            name = line.split()[0][1:]
            blocks[name] = line
        else:
            blocks[name] += "\n" + line
    return blocks


def go_usage(program: str) -> dict[str, str]:
    """NSQ's program's ``-help``, by flag name."""
    return usage_by_flag(subprocess.run([go_program(program), "-help"], capture_output=True, text=True,
                                        timeout=15).stderr)


def assert_usage_is_nsqs(our_help: str, program: str, ours_only: set[str]) -> None:
    """Our ``-help`` has NSQ's program's lines for every flag NSQ has, and beyond them only ``ours_only``."""
    ours, theirs = usage_by_flag(our_help), go_usage(program)
    assert set(ours) - set(theirs) == ours_only and set(theirs) <= set(ours)
    assert {name: ours[name] for name in theirs} == theirs


def parse_outcome(command: list[str], args: list[str], program: str) -> tuple[bool, str]:
    """Whether a daemon takes these flags (``--version`` goes first: NSQ's daemons and ours stop
    right after parsing them), else its first error line without our ``<program>: `` prefix or Go's
    log.Fatalf time stamp. Leave no argument after the flags: ours refuses it, NSQ's ignores it."""
    result = subprocess.run([*command, "--version", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    line = (result.stderr.splitlines() or [""])[0].removeprefix(f"{program}: ")
    return result.returncode == 0, re.sub(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", "", line)
