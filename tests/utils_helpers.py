"""Running the command-line utilities as a shell script would: the console scripts installed
in the virtualenv, as subprocesses with their stdin, stdout and stderr, plus HTTP helpers for
the nsqd they talk to."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from .waiting import wait_until  # noqa: F401 (the name the utilities' tests import)

BIN = Path(sys.executable).parent
GO_LOG_STAMP = r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d"


def script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{path} is missing: `pip install -e .` installs the console scripts"
    return str(path)


def run_script(name: str, *args: str, input: bytes | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run to completion; stdout and stderr as text."""
    result = subprocess.run([script(name), *args], input=input, capture_output=True, timeout=timeout)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    return result


def run_scripts(name: str, *arg_lists: list[str]) -> list[subprocess.CompletedProcess]:
    """Several runs of one utility at once (each as :func:`run_script`), in order."""
    with ThreadPoolExecutor(len(arg_lists)) as pool:
        return list(pool.map(lambda args: run_script(name, *args), arg_lists))


def assert_go_usage(result: subprocess.CompletedProcess, program: str, expected_flags: str) -> None:
    """``-h`` output: Go's usage header and PrintDefaults' lines, on stderr only."""
    assert result.stdout == ""
    assert result.stderr == f"Usage of {program}:\n" + expected_flags


def assert_fatal(result: subprocess.CompletedProcess, message: str) -> None:
    """log.Fatal: one stamped line on stderr, exit status 1."""
    assert result.returncode == 1, result.stderr
    last_line = result.stderr.splitlines(True)[-1]
    assert re.fullmatch(GO_LOG_STAMP + " " + re.escape(message) + "\n", last_line), result.stderr


def assert_all_fatal(name: str, cases: list[tuple[list[str], str]]) -> None:
    """Each (arguments, log.Fatal message) case, the runs made at once."""
    for (args, message), result in zip(cases, run_scripts(name, *[args for args, _ in cases])):
        assert_fatal(result, message)


class Utility:
    """A long-running utility (ours, or the ``program`` given): its stdout and stderr collected line by
    line as they come."""

    def __init__(self, name: str, *args: str, stdin=subprocess.DEVNULL, program: str | None = None):
        self.proc = subprocess.Popen([program or script(name), *args], stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.stdout: list[bytes] = []
        self.stderr: list[str] = []
        self._readers = [threading.Thread(target=self._keep, args=(self.proc.stdout, self.stdout, False), daemon=True),
                         threading.Thread(target=self._keep, args=(self.proc.stderr, self.stderr, True), daemon=True)]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _keep(stream, lines: list, decode: bool) -> None:
        for line in stream:
            lines.append(line.decode() if decode else line)

    def wait_for(self, predicate, timeout: float = 10.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; stderr:\n{''.join(self.stderr)}")
            if self.proc.poll() is not None and not predicate():
                time.sleep(0.1)
                if not predicate():
                    raise AssertionError(f"exited {self.proc.returncode} before {what}; "
                                         f"stderr:\n{''.join(self.stderr)}")
            time.sleep(0.02)

    def wait_for_stderr(self, text: str, timeout: float = 10.0) -> None:
        self.wait_for(lambda: text in "".join(self.stderr), timeout, repr(text))

    def wait_for_lines(self, count: int, timeout: float = 10.0) -> None:
        self.wait_for(lambda: len(self.stdout) >= count, timeout, f"{count} lines on stdout")

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        return self.wait(timeout)

    def wait(self, timeout: float = 15.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def http(port: int, path: str, body: bytes | None = None, method: str | None = None) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     method=method or ("POST" if body is not None else "GET"))
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read()


def publish(port: int, topic: str, *bodies: bytes) -> None:
    """Each body as one message, in order, through nsqd's /mpub (bodies without newlines)."""
    http(port, f"/mpub?topic={topic}", b"\n".join(bodies))


def channel_stats(port: int, topic: str, channel: str) -> dict | None:
    stats = json.loads(http(port, f"/stats?format=json&topic={topic}"))
    for found in stats.get("topics") or []:
        for row in found.get("channels") or []:
            if row["channel_name"] == channel:
                return row
    return None


def topic_stats(port: int, topic: str) -> dict | None:
    stats = json.loads(http(port, f"/stats?format=json&topic={topic}"))
    return next(iter(stats.get("topics") or []), None)

