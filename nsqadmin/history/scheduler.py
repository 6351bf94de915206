"""nsqadmin's rollup worker: one long-lived ``nsqadmin-rollup --rollup-interval`` process, supervised.

Theory of operation. Spark never runs in the web process: a JVM and seconds of CPU would stall
every page. Nor does nsqadmin start a JVM per run any more (~12 CPU s each, a run a minute half a
core for ever): it starts one worker, ``python -m nsqadmin.history.rollup_main --stats-dir DIR
--spark-master M --stats-retention R --rollup-interval I --supervised --log-level L``, which
keeps its SparkSession warm between runs and schedules them itself (rollup_main.py). The
recorder writes snapshots on its own, so the worker needs nothing from nsqadmin but to be kept
running:

- Its output lines become nsqadmin log lines prefixed ``rollup: `` (its own log lines, and
  Spark's, at their level, without their prefix and time).
- If it exits while nsqadmin runs, the exit is logged as an error with its status and last
  line, and it is started again after a backoff that doubles from BACKOFF_SECONDS up to
  MAX_BACKOFF_SECONDS, back to the start once a worker has run for HEALTHY_SECONDS.
- Its standard input is a pipe nsqadmin never writes: when nsqadmin exits, however it exits
  (kill -9 included), the pipe closes and the worker stops (--supervised).
- At stop, the worker's process group (it and its JVM) gets SIGTERM and STOP_SECONDS to exit,
  then SIGKILL. The job publishes every file atomically, so stopping it mid-run loses only that
  run's work.
"""

import asyncio
import logging
import os
import re
import signal
import sys
import time

from common.goflags import format_duration

log = logging.getLogger("nsqadmin")

STOP_SECONDS = 10.0
BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
HEALTHY_SECONDS = 60.0
OUTPUT_LINE_LIMIT = 1 << 20
# A log line of the job (common/lg) or of Spark (its log4j2 pattern): ``[prefix] date time LEVEL: message``.
LOG_LINE = re.compile(r"\[[^\]]*\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+ (DEBUG|INFO|WARN|WARNING|ERROR|FATAL): (.*)")
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING, "WARNING": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.ERROR}


def worker_command(opts) -> list[str]:
    return [sys.executable, "-m", "nsqadmin.history.rollup_main", "--stats-dir", opts.stats_dir,
            "--spark-master", opts.spark_master, "--stats-retention", format_duration(opts.stats_retention),
            "--rollup-interval", format_duration(opts.rollup_interval), "--supervised",
            "--log-level", opts.log_level]


def job_environment(spark_master: str) -> dict[str, str]:
    """nsqadmin's environment, with the job's output unbuffered (its lines are logged as they come)
    and, for a local master, Spark bound to loopback: a local job talks only to itself."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if spark_master.startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


class RollupWorker:
    """Keeps the rollup worker process running."""

    def __init__(self, opts):
        self.command = worker_command(opts)
        self.env = job_environment(opts.spark_master)
        self._process: asyncio.subprocess.Process | None = None
        self._loop: asyncio.Task | None = None
        self._stopping = False

    def start(self) -> None:
        self._loop = asyncio.create_task(self._supervise())

    async def _supervise(self) -> None:
        backoff = BACKOFF_SECONDS
        while not self._stopping:
            started = time.monotonic()
            status, last_line = await self._run_worker()
            if self._stopping:
                return
            if time.monotonic() - started >= HEALTHY_SECONDS:
                backoff = BACKOFF_SECONDS
            log.error("rollup: the worker exited with status %s: %s; starting it again in %s", status,
                      last_line or "(no output)", format_duration(backoff))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _run_worker(self) -> tuple[int | None, str]:
        """Start the worker and log its output until it exits: (its status, its last message)."""
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True, limit=OUTPUT_LINE_LIMIT)
        except OSError as exc:
            return None, f"cannot start it: {exc}"
        log.info("rollup: the worker started (pid %d)", self._process.pid)
        if self._stopping:  # stop() came while the process started
            self._signal(signal.SIGTERM)
        try:
            last_line = await self._log_output()
            return await self._process.wait(), last_line
        finally:
            if self._process.returncode is not None:
                self._process = None

    async def _log_output(self) -> str:
        """Log each line of the worker's output, a log line at its own level; the last message."""
        last = ""
        while True:
            try:
                line = await self._process.stdout.readline()
            except ValueError:  # a line past OUTPUT_LINE_LIMIT: its start was consumed, go on with the rest
                continue
            if not line:
                return last
            text = line.decode("utf-8", "replace").rstrip()
            if not text:
                continue
            parsed = LOG_LINE.fullmatch(text)
            level, last = (LEVELS[parsed.group(1)], parsed.group(2)) if parsed else (logging.INFO, text)
            log.log(level, "rollup: %s", last)

    def _signal(self, signum: int) -> None:
        """``signum`` to the worker's process group (the worker and the JVM it started)."""
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signum)
        except ProcessLookupError:  # already gone
            pass

    def close(self) -> None:
        """Start no worker again (nsqadmin is stopping)."""
        self._stopping = True

    async def stop(self) -> None:
        """Stop the worker (SIGTERM, then SIGKILL after STOP_SECONDS) and its supervision."""
        self.close()
        if self._loop is None:
            return
        if self._process is None:  # between two workers
            self._loop.cancel()
        self._signal(signal.SIGTERM)
        _, pending = await asyncio.wait({self._loop}, timeout=STOP_SECONDS)
        if pending:
            log.warning("rollup: the worker did not stop within %s; killing it", format_duration(STOP_SECONDS))
            self._signal(signal.SIGKILL)
            await asyncio.wait({self._loop})
        log.info("rollup: the worker stopped")
