"""A real standalone Spark cluster for tests: one master and one worker on loopback, from the pyspark package.

pip's pyspark ships ``bin/spark-class`` but not Spark's ``sbin/start-master.sh``, so both daemons are
started through spark-class, each in a process group of its own: the worker starts an executor
process per application, and stopping the group stops those too. Everything binds to 127.0.0.1
(SPARK_LOCAL_IP, which also puts the web UIs there). The master takes ~8 s to start on this
machine and the worker registers ~2 s later; the master's web UI JSON says when a worker is ALIVE.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_env() -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            # the REST submission server would take the fixed port 6066, which the tests do not use
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}


def start_daemon(main_class: str, args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as output:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main_class, *args], env=spark_env(),
                                stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop_daemon(process: subprocess.Popen) -> None:
    """Stop the daemon and every process it started (its executors): SIGTERM, then SIGKILL."""
    for signum, grace in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
            if not group_alive(process.pid):
                return


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def log_tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return f"--- the end of {log} ---\n" + "\n".join(lines)


def master_state(web_port: int) -> dict | None:
    """The master's view of the cluster from its web UI, or None while the UI is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as response:
            return json.load(response)
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def wait_for_alive_worker(web_port: int, daemons: dict[Path, subprocess.Popen]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        exited = [log for log, process in daemons.items() if process.poll() is not None]
        if exited:
            raise RuntimeError("a Spark daemon exited while starting\n" + "\n".join(map(log_tail, exited)))
        state = master_state(web_port)
        if state and any(worker["state"] == "ALIVE" for worker in state.get("workers", [])):
            return
        time.sleep(0.5)
    raise RuntimeError(f"no Spark worker registered ALIVE with the master within {START_TIMEOUT:.0f} s\n"
                       + "\n".join(map(log_tail, daemons)))


@contextlib.contextmanager
def spark_cluster(directory: Path, cores: int = 2, memory: str = "2g") -> Iterator[str]:
    """Start a master and a worker with ``cores`` and ``memory``; yield the master URL; stop both for sure.

    Their logs stay in ``directory`` (master.log, worker.log), the worker's per-application
    files (executor logs) in ``directory``/work."""
    port, web_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    work_dir = directory / "work"
    work_dir.mkdir(parents=True, exist_ok=True)
    daemons: dict[Path, subprocess.Popen] = {}
    try:
        daemons[directory / "master.log"] = start_daemon(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)], directory / "master.log")
        daemons[directory / "worker.log"] = start_daemon(
            "org.apache.spark.deploy.worker.Worker",
            [master_url, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
             "--webui-port", str(free_port()), "--work-dir", str(work_dir)], directory / "worker.log")
        wait_for_alive_worker(web_port, daemons)
        yield master_url
    finally:
        for process in reversed(daemons.values()):
            stop_daemon(process)
