"""``nsqadmin-rollup``: the stats-history rollup job over nsqadmin's ``--stats-dir``, once or as a worker.

Flags in Go's syntax (common/goflags). Without --rollup-interval: one run, exit status 0 after
it (or when another run holds the lock), 1 with a one-line message for bad flags, a stats
directory or file that cannot be used, or a Spark that cannot run the job (the traceback goes
to the debug log).

With --rollup-interval: a worker, the way nsqadmin runs the job. It runs at once and then
every interval, one run at a time (a tick while a run goes on is skipped), keeping its
SparkSession (its JVM, classes loaded and code compiled) from one run to the next, so that a
run of a minute's new snapshots costs a fraction of a second of CPU instead of a JVM start.
A large run (a first rollup of a day) gets a JVM of its own, sized for it, that ends with the
run; the next small run starts the small one again. A failed run is logged and the next tick
runs again (after a Spark failure, on a new session). Its runs write the 1m windows; the
1h and 1d windows of the open hour follow every ten runs, at most COARSER_EVERY (10 minutes),
and when the hour closes (rollup_job.py), while a single run writes every level at once. SIGTERM or SIGINT ends the worker; with
--supervised (nsqadmin passes it) so does the end of its standard input, which closes when
nsqadmin exits however it exits, so a worker never outlives its nsqadmin.
"""

import logging
import os
import re
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from common import lg
from common.goflags import Flag, FlagError, format_duration, parse_args, resolve, usage
from serving.logs import nsq_logger

from .rollup_job import COARSER_EVERY, DEFAULT_RETENTION, run_rollup
from .rollup_state import StatsDirError
from .spark_session import SessionOnDemand

PROGRAM = "nsqadmin-rollup"
# The worker's 1h and 1d windows wait behind its 1m windows for this many runs (at most COARSER_EVERY):
# a minute's interval gives the 10 minutes (the default 5 minutes: every other run), a short one keeps the
# day chart that close behind.
COARSER_RUNS = 10
# Masters whose executors share this machine's files: the job names raw files by local path.
MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|spark://[^/\s]+:[0-9]+")

FLAGS = [
    Flag("stats-dir", "str", "", "directory of the stats history: raw snapshots in raw/, rollups in rollups/"),
    Flag("spark-master", "str", "local[*]",
         "Spark master: local[N], local[*], or spark://host:port of a cluster on this machine"),
    Flag("stats-retention", "duration", DEFAULT_RETENTION.total_seconds(),
         "how long raw snapshots and rollup windows are kept"),
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal"),
    Flag("rollup-interval", "duration", 0.0,
         "run as a worker: a run now and every interval, with a SparkSession kept warm (0: one run, then exit)"),
    Flag("supervised", "bool", False, "also stop when standard input closes (nsqadmin runs its worker so)"),
]


def _check_stats_dir(path: str) -> None:
    if not path:
        raise FlagError("--stats-dir is required")
    if not os.path.exists(path):
        raise FlagError(f"--stats-dir {path}: no such directory")
    if not os.path.isdir(path):
        raise FlagError(f"--stats-dir {path}: not a directory")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise FlagError(f"--stats-dir {path}: permission denied (the job reads and writes it)")


def _validate(opts: SimpleNamespace) -> None:
    _check_stats_dir(opts.stats_dir)
    if not MASTER.fullmatch(opts.spark_master):
        raise FlagError(f"invalid --spark-master {opts.spark_master!r}: use local[N], local[*] or spark://host:port")
    if opts.stats_retention <= 0:
        raise FlagError("--stats-retention must be positive")
    if opts.rollup_interval < 0:
        raise FlagError("--rollup-interval must not be negative")
    opts.log_level = opts.log_level.lower()
    if opts.log_level not in lg.LEVELS:
        raise FlagError(f"invalid log level {opts.log_level!r}: use one of {', '.join(lg.LEVELS)}")


def load_options(argv: list[str]) -> SimpleNamespace:
    """Flags and defaults resolved into validated options, or FlagError."""
    opts = SimpleNamespace(**resolve(FLAGS, parse_args(FLAGS, argv), {}).values)
    _validate(opts)
    return opts


def _run_once(opts: SimpleNamespace, session: SessionOnDemand, log: logging.Logger,
              coarser_every: timedelta = timedelta(0)) -> bool:
    """One run with ``session``; whether it succeeded (its failure logged)."""
    try:
        summary = run_rollup(Path(opts.stats_dir), session, retention=timedelta(seconds=opts.stats_retention),
                             coarser_every=coarser_every)
    except StatsDirError as exc:
        log.critical("%s", exc)
        return False
    except (OSError, pa.ArrowException) as exc:
        log.debug("rollup failed", exc_info=True)
        log.critical("rollup failed: %s", exc)
        return False
    except (PySparkException, Py4JError) as exc:
        log.debug("Spark failed", exc_info=True)
        log.critical("Spark failed: %s", str(exc).strip().splitlines()[0])
        stop_quietly(session, log)
        return False
    if summary is not None:
        log.info("%s", summary.line())
    return True


class _DebugRelay(logging.Handler):
    """The root logger's records as debug lines of the job's log."""

    def __init__(self, log: logging.Logger):
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log.debug("%s: %s", record.name, record.getMessage(), exc_info=record.exc_info)


def job_logger(level: str) -> logging.Logger:
    """The job's log, which also gets what is logged on the root logger, as debug lines.

    py4j reports a call to the JVM that failed on the network with ``logging.exception`` on the
    root logger, and with no handler there that installs one printing the error and its
    traceback to standard error. The JVM going away in the middle of a call (killed, or ending
    first when nsqadmin stops the worker: both get its SIGTERM) then put a traceback in
    nsqadmin's log, though the call raises and the run's failure is logged anyway."""
    log = nsq_logger(PROGRAM, level, f"[{PROGRAM}] ")
    logging.root.handlers[:] = [_DebugRelay(log)]
    return log


def stop_quietly(session: SessionOnDemand, log: logging.Logger) -> None:
    """Stop Spark after a failed or interrupted run: its JVM may be gone already (it gets the
    same SIGTERM as the worker when nsqadmin stops), and then stopping it fails too."""
    try:
        session.stop()
    except (PySparkException, Py4JError, OSError) as exc:
        log.debug("stopping Spark: %s", exc)


def coarser_wait(interval: float) -> timedelta:
    """How long the worker's 1h and 1d windows wait: COARSER_RUNS intervals, at most
    COARSER_EVERY, less half an interval, so that the run falling due is not put off by one more
    interval when its clock reads a few milliseconds short (each run reads the time as it starts)."""
    return min(COARSER_EVERY, timedelta(seconds=COARSER_RUNS * interval)) - timedelta(seconds=interval / 2)


def _run(opts: SimpleNamespace, log: logging.Logger) -> int:
    session = SessionOnDemand(opts.spark_master)
    try:
        return 0 if _run_once(opts, session, log) else 1
    finally:
        session.stop()


class Stop(BaseException):
    """SIGTERM or SIGINT, or (supervised) the end of standard input. Not an Exception, which py4j
    would catch, log and turn into a Py4JNetworkError when it comes during a call to the JVM."""


def _raise_stop(signum, frame) -> None:
    """Stop once: a second SIGTERM (nsqadmin's, after the end of standard input sent the first)
    would raise again in the middle of stopping Spark."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stop()


def _stop_at_end_of_stdin() -> None:
    """Read standard input until it ends (its writer, nsqadmin, is gone), then stop the worker."""
    while sys.stdin.buffer.read(4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _work(opts: SimpleNamespace, log: logging.Logger) -> int:
    """A run every --rollup-interval until stopped, on one SparkSession kept between small runs."""
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    if opts.supervised:
        threading.Thread(target=_stop_at_end_of_stdin, daemon=True, name="stdin").start()
    session = SessionOnDemand(opts.spark_master)
    log.info("worker: a rollup every %s", format_duration(opts.rollup_interval))
    coarser_every = coarser_wait(opts.rollup_interval)
    try:
        tick = time.monotonic()
        while True:
            _run_once(opts, session, log, coarser_every)
            if session.large:  # a large run's JVM goes; the next small run starts the small one
                session.stop()
            skipped = -1
            while tick <= time.monotonic():
                tick += opts.rollup_interval
                skipped += 1
            if skipped:
                log.info("worker: the run took longer than --rollup-interval; skipped %d tick(s)", skipped)
            time.sleep(tick - time.monotonic())
    except Stop:
        log.info("worker: stopping")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop_quietly(session, log)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg.lstrip("-") in ("h", "help") for arg in argv):
        print(usage(PROGRAM, FLAGS), file=sys.stderr)
        return 0
    try:
        opts = load_options(argv)
    except FlagError as exc:
        print(f"{PROGRAM}: {exc}", file=sys.stderr)
        return 1
    log = job_logger(opts.log_level)
    return _work(opts, log) if opts.rollup_interval else _run(opts, log)


if __name__ == "__main__":
    sys.exit(main())
