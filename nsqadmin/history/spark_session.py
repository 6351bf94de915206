"""The rollup job's SparkSession: settings measured on a shared 2-core machine.

Theory of operation. The JVM is started only when a run has raw files to roll up
(:class:`SessionOnDemand`), and then it knows how much it will read. Most runs are small (a
minute of new snapshots, in nsqadmin's worker one after another on the same JVM): their JVM
has the C1 compiler alone, the serial collector and a heap of SMALL_RUN_DRIVER_MEMORY, which
is what a worker keeps between runs. A large run (a first rollup of a day) spends its time in
Spark's generated loops over millions of rows, which run about twice as fast once C2 compiles
them, so it gets a JVM of its own with the full JIT (compiling only the hotter methods), the
parallel collector and a heap of DRIVER_MEMORY, ended when the session stops (a run of the
other size stops the session, and the JVM with it, so the next one starts with its own
options). Either way the JVM maps the classes it loaded in earlier runs from a
class-data-sharing archive (class_archive.py), which the first run writes as its JVM exits.
Spark's own logging is cut to errors by a log4j2 file written for the session's lifetime, so
the job's progress lines stay readable. The number of shuffle partitions is set per run, from
the size of the raw files read.
"""

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import SparkSession

from . import layout
from .class_archive import ClassArchive

log = logging.getLogger("nsqadmin-rollup")

APP_NAME = "nsqadmin-rollup"
DRIVER_MEMORY = "3g"
# A small run's JVM stays up between a worker's runs: its heap is what the worker keeps. 512 MB
# is the least Spark accepts (a heap of 450 MiB after the JVM's own share); a run of a few
# minutes of a 2,200-series cluster uses a fraction of it.
SMALL_RUN_DRIVER_MEMORY = "512m"
EXECUTOR_MEMORY = "1500m"
# The small JVM starts with a small heap and gives back what a collection frees beyond 30%
# (the serial collector resizes at full collections), with room for C1's code alone and
# smaller thread stacks: with a 1 GB heap and the defaults a warm worker's JVM grew to 1.1 GiB
# of RSS, with these to ~550 MiB, at the same CPU a run.
SMALL_RUN_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms32m -XX:MinHeapFreeRatio=10 "
                         "-XX:MaxHeapFreeRatio=30 -XX:ReservedCodeCacheSize=48m -Xss512k")
# A large run's JVM compiles a method with C1 or C2 after ten times the usual invocations and
# loop iterations: with the defaults C2 spent ~28 CPU s of a full run's ~120 on the 2 cores the
# tasks need (3,500 methods), with these 10-13, and the tasks took no more CPU (the hot loops
# still reach C2); at thirty times they took more.
LARGE_RUN_JVM_OPTIONS = "-XX:+UseParallelGC -XX:CompileThresholdScaling=10"
LARGE_RUN_BYTES = 32 << 20
JVM_EXIT_SECONDS = 120
# One shuffle partition per this many bytes of raw Parquet: at fewer partitions the window's
# sort of a full day spills to disk.
RAW_BYTES_PER_SHUFFLE_PARTITION = 16 << 20
MIN_SHUFFLE_PARTITIONS = 2
MAX_SHUFFLE_PARTITIONS = 64
# The raw files' scan is split into at least this many tasks a core: Spark's default (one a
# core, with room for files' opening) made a day's 24 hourly files 5 uneven tasks, the last of
# which ran alone on one of the two cores for 2-3 s; at four a core they are 8 tasks of 3 files.
# Runs of a few small files keep one task a file.
SCAN_TASKS_PER_CORE = 4
# The rollups' numeric columns, written without Parquet's dictionary (see SETTINGS).
UNDICTIONARIED_COLUMNS = tuple(field.name for field in layout.ROLLUP_SCHEMA
                               if pa.types.is_integer(field.type) or pa.types.is_floating(field.type))
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
# pyspark's JVM prints "Setting default log level" unless its gateway's logger is configured
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [spark] %d{yyyy/MM/dd HH:mm:ss.SSSSSS} %p: %c{1}: %m%n%ex
"""

SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    # A run compiles ~70 generated classes, more than the 100 Spark keeps from one run to the
    # next once a warm worker's runs alternate: with room for them, a run compiles only the ~8
    # whose code holds its own times (10% of a warm one-minute run's CPU)
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.ui.enabled": "false",
    # PySpark records the Python call site of every DataFrame and Column function for the query
    # context of errors: four to six py4j round trips a call (the active session, the setting
    # of the stack depth, the origin set and cleared), ~40% of a warm one-minute run's calls. The
    # job's errors say what failed without it.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.memory": DRIVER_MEMORY,
    "spark.executor.memory": EXECUTOR_MEMORY,
    "spark.sql.parquet.compression.codec": "snappy",
    # pyarrow reads the rollups: timestamps as Parquet's TIMESTAMP(MICROS, UTC), not Spark's INT96
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # the job names every raw file it reads: list them on the driver, not in a Spark job
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    "spark.sql.shuffle.partitions": str(MIN_SHUFFLE_PARTITIONS),
    # The 1m write's join with its hours' partition names made the optimizer infer a not-null
    # filter on each row's hour, which it pushes under the cluster's polls (grouped by minute)
    # down to their scan of the raw rows but not under the deltas' window: the two uses of the
    # raw rows' shuffle then differed, and Spark read and shuffled every raw row twice. Without
    # constraint propagation both plans are the same and the shuffle runs once.
    "spark.sql.constraintPropagation.enabled": "false",
    # The aggregations' input comes sorted from the windows, and Spark would then pick a sort
    # aggregation, which it does not compile: the hash aggregation is two to three times faster.
    "spark.sql.execution.replaceHashWithSortAgg": "false",
    # A series' snapshots are one window partition (8,640 a day): keep them in memory.
    "spark.sql.windowExec.buffer.in.memory.threshold": "262144",
    # Parquet's writer put every long and double of the rollups through a hash map for its
    # dictionary (most of its 17% of the 1m level), which the counters' and depths' values, and
    # the e2e latencies', repeat too little to repay. Without it, format v2 writes the longs as
    # deltas, which keeps the files the size they were (1m files 2% smaller, the doubles 1.5-2
    # times larger and the longs a quarter smaller) where plain longs made them 35% larger.
    **{f"spark.hadoop.parquet.enable.dictionary#{name}": "false" for name in UNDICTIONARIED_COLUMNS},
    "spark.hadoop.parquet.writer.version": "v2",
    # A task writes its hour's minutes (or its partition's windows) as they come, rather than
    # sorting every row by its partition first.
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "64",
    # Checksums of shuffle data cost 3% of a full run and guard against retries a local run
    # does not make.
    "spark.shuffle.checksum.enabled": "false",
    "spark.sql.shuffle.orderIndependentChecksum.enabled": "false",
}


def _log4j2_file() -> Path:
    handle, name = tempfile.mkstemp(prefix="nsqadmin-rollup-log4j2-", suffix=".properties")
    with os.fdopen(handle, "w") as out:
        out.write(LOG4J2_PROPERTIES)
    return Path(name)


def jvm_options(raw_bytes: int) -> str:
    return LARGE_RUN_JVM_OPTIONS if is_large(raw_bytes) else SMALL_RUN_JVM_OPTIONS


def is_large(raw_bytes: int) -> bool:
    return raw_bytes >= LARGE_RUN_BYTES


def build_session(master: str, log4j2_file: Path, raw_bytes: int = 0, archive: ClassArchive | None = None) -> SparkSession:
    """A session on ``master`` (``local[N]``, ``local[*]`` or ``spark://host:port`` on this
    machine: executors read and write the same local paths as the driver), for a run that
    reads ``raw_bytes`` of raw Parquet, its driver using or writing ``archive``."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    java_options = f"{jvm_options(raw_bytes)} -Dlog4j2.configurationFile={log4j2_file.as_uri()}"
    driver_options = f"{java_options} {archive.option()}" if archive else java_options
    builder = SparkSession.builder.master(master).appName(APP_NAME)
    for key, value in SETTINGS.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.extraJavaOptions", driver_options)
    if not is_large(raw_bytes):
        builder = builder.config("spark.driver.memory", SMALL_RUN_DRIVER_MEMORY)
    if not master.startswith("spark://"):
        # Spark's Python workers run this interpreter, not the first python3 on PATH, which may be
        # another version (refused by PySpark) or lack this environment's packages; a cluster's
        # workers run PYSPARK_PYTHON, or python3, as Spark's own rule says
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    else:
        builder = (builder.config("spark.executor.extraJavaOptions", java_options)
                   .config("spark.cores.max", str(os.cpu_count() or 2)))
    session = builder.getOrCreate()
    _quiet_accumulator_server(session.sparkContext)
    return session


def _quiet_accumulator_server(context: SparkContext) -> None:
    """PySpark's accumulator server (a socketserver in the driver) prints a traceback to stderr
    when the JVM goes away in the middle of its connection (killed, or exiting before the driver
    stops): the worker's supervisor already logs the death, so the error is only a debug line."""
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = _log_accumulator_error


def _log_accumulator_error(request, client_address) -> None:
    """socketserver's handle_error, called in the handler's ``except`` block."""
    log.debug("the JVM's accumulator connection from %s ended: %r", client_address, sys.exc_info()[1])


def scan_tasks_for(session: SparkSession) -> int:
    """The least number of tasks (``spark.sql.files.minPartitionNum``) to scan a run's raw files in."""
    return SCAN_TASKS_PER_CORE * session.sparkContext.defaultParallelism


def shuffle_partitions_for(raw_bytes: int) -> int:
    """Shuffle partitions for a run reading ``raw_bytes`` of raw Parquet."""
    return max(MIN_SHUFFLE_PARTITIONS, min(MAX_SHUFFLE_PARTITIONS, raw_bytes // RAW_BYTES_PER_SHUFFLE_PARTITION))


class SessionOnDemand:
    """A SparkSession started on first use, for a run reading ``raw_bytes``; ``stop()`` ends it
    and its JVM if it was started. A run of the other size (``is_large``) than the session's
    gets a new session and JVM, with its own JVM options and heap."""

    def __init__(self, master: str):
        self.master = master
        self._spark: SparkSession | None = None
        self._large = False
        self._log4j2_file: Path | None = None
        self._archive: ClassArchive | None = None

    @property
    def large(self) -> bool:
        """Whether the running session is one for large runs."""
        return self._spark is not None and self._large

    def __call__(self, raw_bytes: int) -> SparkSession:
        if self._spark is not None and self._large != is_large(raw_bytes):
            self.stop()
        if self._spark is None:
            started = time.monotonic()
            self._log4j2_file = _log4j2_file()
            self._archive = ClassArchive.for_options(jvm_options(raw_bytes))
            self._spark = build_session(self.master, self._log4j2_file, raw_bytes, self._archive)
            self._large = is_large(raw_bytes)
            log.info("started Spark on %s in %.1f s (%s)", self.master, time.monotonic() - started,
                     self._archive.describe() if self._archive else "no class archive")
        return self._spark

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
            exited = _jvm_exited()
            if self._archive is not None and self._archive.writing is not None:
                self._archive.finish(exited)
        if self._log4j2_file is not None:
            self._log4j2_file.unlink(missing_ok=True)
            self._log4j2_file = None


def _jvm_exited() -> bool:
    """End the stopped session's JVM (it exits when its stdin closes) and wait for it; whether
    it exited cleanly. pyspark then starts a new JVM for a later session."""
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return False
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    process.stdin.close()
    try:
        return process.wait(timeout=JVM_EXIT_SECONDS) == 0
    except subprocess.TimeoutExpired:
        process.kill()
        return False
