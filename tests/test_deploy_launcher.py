"""``make run``'s launcher (deploy/run_local.py), run as a user runs it: a real cluster on ports the
system picks, stopped with SIGINT to the whole process group, as a terminal's Ctrl-C does, or with
Ctrl-C typed into a real pseudo-terminal running ``make run``."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from .helpers import ROOT
from .utils_helpers import run_script

LABELLED = re.compile(r"(launcher|nsqlookupd|nsqd-\d+|nsqadmin) +\| ")
STARTED = re.compile(r"^launcher +\| started (\S+) \(pid (\d+)\)", re.M)
UP = "press Ctrl-C to stop"
START_SECONDS = 60  # generous: the machine may be busy with other tests


class Launcher:
    """``python -m deploy.run_local`` in a process group of its own, its output kept line by line."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "deploy.run_local", *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._keep_lines, daemon=True)
        self._reader.start()

    def _keep_lines(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output(), re.M)
            if match:
                return match
            if self.proc.poll() is not None:
                self._reader.join(5)
                break
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} in the launcher's output:\n{self.output()}")

    def address(self, label: str, kind: str) -> str:
        return self.wait_for(rf"^launcher +\| {label}: .*\b{kind} (?:http://)?([\d.]+:\d+)", 1).group(1)

    def pids(self) -> dict[str, int]:
        return {label: int(pid) for label, pid in STARTED.findall(self.output())}

    def ctrl_c(self) -> int:
        """SIGINT to the launcher's whole process group, as a terminal sends it; its exit status."""
        os.killpg(self.proc.pid, signal.SIGINT)
        status = self.proc.wait(60)
        self._reader.join(5)
        return status

    def kill(self) -> None:
        """After a failed test: the launcher and any daemon it left behind."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        kill_leftovers(self.pids())


@pytest.fixture
def launch():
    launched: list[Launcher] = []

    def start(*args: str) -> Launcher:
        launched.append(Launcher("--ephemeral-ports", *args))
        return launched[-1]

    yield start
    for launcher in launched:
        launcher.kill()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one reaps counts as gone: it holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_leftovers(pids: dict[str, int]) -> None:
    """SIGKILL to daemons still running after a failed test, and to the launcher that started them."""
    for pid in pids.values():
        if alive(pid):
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rpartition(")")[2].split()[1])
            os.kill(pid, signal.SIGKILL)
            if parent != 1 and parent != os.getpid():
                os.kill(parent, signal.SIGKILL)


def assert_gone(pids: dict[str, int]) -> None:
    assert pids and not [label for label, pid in pids.items() if alive(pid)]


def wait_for_http(url: str, check, timeout: float = 10):
    """``check(response)`` true within ``timeout``: registrations and polls are asynchronous."""
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(url, timeout=5)
        if check(response) or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def test_the_cluster_comes_up_works_end_to_end_and_ctrl_c_stops_it_cleanly(launch, tmp_path):
    launcher = launch(f"--data-dir={tmp_path}")
    launcher.wait_for(UP, START_SECONDS)
    pids = launcher.pids()
    assert sorted(pids) == ["nsqadmin", "nsqd-1", "nsqd-2", "nsqlookupd"]
    lookupd_http = launcher.address("nsqlookupd", "HTTP")
    nsqd_tcp = [launcher.address(f"nsqd-{n}", "TCP") for n in (1, 2)]
    nsqd1_http = launcher.address("nsqd-1", "HTTP")
    admin = launcher.wait_for(r"^launcher +\| nsqadmin: +(http://[\d.]+:\d+/)", 1).group(1)

    published = httpx.post(f"http://{nsqd1_http}/pub?topic=deploy_launcher", content=b"flushed on the way out")
    assert published.text == "OK"
    nodes = wait_for_http(f"http://{lookupd_http}/nodes", lambda r: len(r.json()["producers"]) == 2)
    assert sorted(f"127.0.0.1:{p['tcp_port']}" for p in nodes.json()["producers"]) == sorted(nsqd_tcp)
    assert httpx.get(admin + "ping").text == "OK"
    admin_nodes = wait_for_http(admin + "api/nodes", lambda r: len(r.json().get("nodes", [])) == 2)
    assert len(admin_nodes.json()["nodes"]) == 2

    assert httpx.post(f"http://{nsqd1_http}/pub?topic=deploy_consumed", content=b"found through nsqlookupd").text == "OK"
    wait_for_http(f"http://{lookupd_http}/lookup?topic=deploy_consumed", lambda r: r.status_code == 200)
    tail = run_script("nsq_tail", f"--lookupd-http-address={lookupd_http}", "--topic=deploy_consumed", "-n", "1")
    assert (tail.returncode, tail.stdout) == (0, "found through nsqlookupd\n"), tail.stderr
    topics = wait_for_http(admin + "api/topics", lambda r: "deploy_consumed" in r.json().get("topics", []))
    assert {"deploy_launcher", "deploy_consumed"} <= set(topics.json()["topics"])

    assert launcher.ctrl_c() == 0, launcher.output()
    assert_gone(pids)
    output = launcher.output()
    assert all(LABELLED.match(line) for line in launcher.lines), output
    stops = [output.index(f"stopping {group}") for group in ("nsqd-1, nsqd-2", "nsqadmin", "nsqlookupd")]
    assert stops == sorted(stops), output
    assert "launcher   | all stopped" in output
    assert all(re.search(rf"^nsqd-{n} +\| .* INFO: ID: {n}$", output, re.M) for n in (1, 2)), output
    assert "deploy_launcher" in (tmp_path / "nsqd1" / "nsqd.dat").read_text()
    assert b"flushed on the way out" in (tmp_path / "nsqd1" / "deploy_launcher.diskqueue.000000.dat").read_bytes()


def test_a_daemon_that_dies_is_reported_at_once_with_its_status(launch, tmp_path):
    launcher = launch(f"--data-dir={tmp_path}", "--nsqd", "1")
    launcher.wait_for(UP, START_SECONDS)
    pids = launcher.pids()
    assert sorted(pids) == ["nsqadmin", "nsqd-1", "nsqlookupd"]
    admin = launcher.wait_for(r"^launcher +\| nsqadmin: +(http://[\d.]+:\d+/)", 1).group(1)

    os.kill(pids["nsqd-1"], signal.SIGKILL)
    killed = time.monotonic()
    launcher.wait_for(r"^launcher +\| nsqd-1 died \(killed by SIGKILL\)$", 10)
    assert time.monotonic() - killed < 5  # at once (the launcher waits on its children), even on a loaded machine
    assert httpx.get(admin + "ping").text == "OK"  # the others go on

    assert launcher.ctrl_c() == 1  # the cluster did not end cleanly
    assert_gone(pids)
    assert "nsqadmin stopped (exit status 0)" in launcher.output()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_ctrl_c_in_a_terminal_ends_make_run_with_status_0(tmp_path):
    """A pseudo-terminal runs ``make run`` as a shell runs a job; Ctrl-C typed into it."""
    master, slave = os.openpty()
    take_terminal = ("import fcntl, os, signal, sys, termios; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                     "fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execvp(sys.argv[1], sys.argv[1:])")
    env = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    make = subprocess.Popen(
        [sys.executable, "-c", take_terminal, "make", "--no-print-directory", "-o", ".venv/.installed", "run",
         f"ARGS=--ephemeral-ports --nsqd 1 --data-dir {tmp_path}", f"BIN={os.path.dirname(sys.executable)}"],
        cwd=ROOT, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env)
    os.close(slave)
    received: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has gone
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_SECONDS
        while UP.encode() not in b"".join(received):
            assert time.monotonic() < deadline and make.poll() is None, b"".join(received).decode()
            time.sleep(0.05)
        os.write(master, b"\x03")
        status = make.wait(60)
        reader.join(5)
    finally:
        output = b"".join(received).decode(errors="replace").replace("\r\n", "\n")
        pids = {label: int(pid) for label, pid in STARTED.findall(output)}
        if make.poll() is None:
            kill_leftovers(pids)
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        os.close(master)
    assert status == 0, output
    assert "make: ***" not in output
    assert "all stopped" in output
    assert_gone(pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a parent-death signal is Linux's")
def test_killing_the_launcher_itself_leaves_no_daemon_running(launch, tmp_path):
    launcher = launch(f"--data-dir={tmp_path}", "--nsqd", "1")
    launcher.wait_for(UP, START_SECONDS)
    pids = launcher.pids()
    launcher.proc.kill()  # SIGKILL: no chance to stop anything
    launcher.proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(pid) for pid in pids.values()):
        time.sleep(0.1)
    assert_gone(pids)


def test_ctrl_c_while_the_daemons_start_stops_them_cleanly(launch, tmp_path):
    launcher = launch(f"--data-dir={tmp_path}", "--nsqd", "1")
    launcher.wait_for(r"^launcher +\| started nsqadmin", START_SECONDS)
    pids = launcher.pids()
    assert launcher.ctrl_c() == 0, launcher.output()
    assert_gone(pids)
    assert UP not in launcher.output()
