"""``nsqadmin-rollup``: one run of the stats-history rollup job over nsqadmin's ``--stats-dir``.

Flags in Go's syntax (common/goflags), as nsqadmin passes them when it schedules the job:
exit status 0 after a run (or when another run holds the lock), 1 with a one-line message
for bad flags, a stats directory or file that cannot be used, or a Spark that cannot run the
job (the traceback goes to the debug log).
"""

import logging
import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from common import lg
from common.goflags import Flag, FlagError, parse_args, resolve, usage
from serving.logs import nsq_logger

from .rollup_job import DEFAULT_RETENTION, run_rollup
from .rollup_state import StatsDirError
from .spark_session import SessionOnDemand

PROGRAM = "nsqadmin-rollup"
# Masters whose executors share this machine's files: the job names raw files by local path.
MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|spark://[^/\s]+:[0-9]+")

FLAGS = [
    Flag("stats-dir", "str", "", "directory of the stats history: raw snapshots in raw/, rollups in rollups/"),
    Flag("spark-master", "str", "local[*]",
         "Spark master: local[N], local[*], or spark://host:port of a cluster on this machine"),
    Flag("stats-retention", "duration", DEFAULT_RETENTION.total_seconds(),
         "how long raw snapshots and rollup windows are kept"),
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal"),
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
    opts.log_level = opts.log_level.lower()
    if opts.log_level not in lg.LEVELS:
        raise FlagError(f"invalid log level {opts.log_level!r}: use one of {', '.join(lg.LEVELS)}")


def load_options(argv: list[str]) -> SimpleNamespace:
    """Flags and defaults resolved into validated options, or FlagError."""
    opts = SimpleNamespace(**resolve(FLAGS, parse_args(FLAGS, argv), {}).values)
    _validate(opts)
    return opts


def _run(opts: SimpleNamespace, log: logging.Logger) -> int:
    session = SessionOnDemand(opts.spark_master)
    try:
        summary = run_rollup(Path(opts.stats_dir), session, retention=timedelta(seconds=opts.stats_retention))
    except StatsDirError as exc:
        log.critical("%s", exc)
        return 1
    except (OSError, pa.ArrowException) as exc:
        log.debug("rollup failed", exc_info=True)
        log.critical("rollup failed: %s", exc)
        return 1
    except (PySparkException, Py4JError) as exc:
        log.debug("Spark failed", exc_info=True)
        log.critical("Spark failed: %s", str(exc).strip().splitlines()[0])
        return 1
    finally:
        session.stop()
    if summary is not None:
        log.info("%s", summary.line())
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
    return _run(opts, nsq_logger(PROGRAM, opts.log_level, f"[{PROGRAM}] "))


if __name__ == "__main__":
    sys.exit(main())
