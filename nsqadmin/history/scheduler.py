"""Runs the rollup job every --rollup-interval, as a process of its own, one run at a time.

Theory of operation. Spark never runs in the web process: a JVM and seconds of CPU per
run would stall every page. Each run is ``python -m nsqadmin.history.rollup_main
--stats-dir DIR --spark-master M --stats-retention R --log-level L``, started with
asyncio's subprocess support, so nsqadmin only waits for its output. Before each run the
recorder flushes, so the job sees every snapshot taken so far.

- One run at a time: a tick while a run is still going is skipped (logged at info).
- The job's output lines become nsqadmin log lines prefixed ``rollup: `` (its own log
  lines, and Spark's, at their level, without their prefix and time); its exit status
  and duration are kept in ``last_run``; a failed run is logged as an error with its
  status and last output line.
- At stop, a running job's process group (the job and its JVM) gets SIGTERM and
  STOP_SECONDS to exit, then SIGKILL. The job publishes every file atomically, so
  stopping it mid-run loses only that run's work.
"""

import asyncio
import logging
import os
import re
import signal
import sys
import time

from common.goflags import format_duration

from .recorder import Recorder

log = logging.getLogger("nsqadmin")

STOP_SECONDS = 10.0
OUTPUT_LINE_LIMIT = 1 << 20
# A log line of the job (common/lg) or of Spark (its log4j2 pattern): ``[prefix] date time LEVEL: message``.
LOG_LINE = re.compile(r"\[[^\]]*\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+ (DEBUG|INFO|WARN|WARNING|ERROR|FATAL): (.*)")
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING, "WARNING": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.ERROR}


def rollup_command(opts) -> list[str]:
    return [sys.executable, "-m", "nsqadmin.history.rollup_main", "--stats-dir", opts.stats_dir,
            "--spark-master", opts.spark_master, "--stats-retention", format_duration(opts.stats_retention),
            "--log-level", opts.log_level]


def job_environment(spark_master: str) -> dict[str, str]:
    """nsqadmin's environment, with the job's output unbuffered (its lines are logged as they come)
    and, for a local master, Spark bound to loopback: a local job talks only to itself."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if spark_master.startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


class RollupScheduler:
    """``last_run``: {"started": unix time, "seconds": duration, "status": exit status} of the
    last finished run, or None before the first."""

    def __init__(self, opts, recorder: Recorder | None):
        self.interval = opts.rollup_interval
        self.recorder = recorder
        self.command = rollup_command(opts)
        self.env = job_environment(opts.spark_master)
        self.last_run: dict | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._run: asyncio.Task | None = None
        self._loop: asyncio.Task | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._run is not None and not self._run.done()

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run_every_interval())

    async def _run_every_interval(self) -> None:
        loop = asyncio.get_running_loop()
        tick = loop.time() + self.interval
        while True:
            await asyncio.sleep(max(0.0, tick - loop.time()))
            while tick <= loop.time():
                tick += self.interval
            if self.running:
                log.info("rollup: the previous run is still going; skipping this one")
                continue
            self._run = asyncio.create_task(self.run_once())

    async def run_once(self) -> None:
        """Flush the recorder, run the job to its end, keep its status and duration."""
        if self.recorder is not None:
            await self.recorder.flush()
        if self._stopping:
            return
        started, clock = time.time(), time.monotonic()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True, limit=OUTPUT_LINE_LIMIT)
        except OSError as exc:
            log.error("rollup: cannot start the job: %s", exc)
            return
        log.info("rollup: the job started (pid %d)", self._process.pid)
        if self._stopping:  # stop() came while the process started
            self._signal(signal.SIGTERM)
        last_line = await self._log_output()
        status = await self._process.wait()
        self._process = None
        seconds = time.monotonic() - clock
        self.last_run = {"started": started, "seconds": seconds, "status": status}
        if status == 0:
            log.info("rollup: the job finished in %.1fs", seconds)
        elif self._stopping:
            log.info("rollup: the job was stopped (status %d) after %.1fs", status, seconds)
        else:
            log.error("rollup: the job failed with status %d after %.1fs: %s", status, seconds,
                      last_line or "(no output)")

    async def _log_output(self) -> str:
        """Log each line of the job's output, a log line at its own level; the last message."""
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
        """``signum`` to the job's process group (the job and the JVM it started)."""
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signum)
        except ProcessLookupError:  # already gone
            pass

    def close(self) -> None:
        """Start no more runs (nsqadmin is stopping)."""
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()

    async def stop(self) -> None:
        """No more runs; a running job is stopped (SIGTERM, then SIGKILL after STOP_SECONDS)."""
        self.close()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
        if not self.running:
            return
        if self._process is not None:
            self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._run), STOP_SECONDS)
        except TimeoutError:
            log.warning("rollup: the job did not stop within %s; killing it", format_duration(STOP_SECONDS))
            self._signal(signal.SIGKILL)
            await self._run
