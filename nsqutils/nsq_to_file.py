"""nsq_to_file: archive topics to files, one line per message, with NSQ's file naming,
rotation, gzip and work-dir options (apps/nsq_to_file/).

Each topic gets a consumer on ``--channel`` and a :class:`.FileLogger`; the topics come
from :class:`.TopicDiscoverer`. SIGINT/SIGTERM sync, finish, close and move every file, then
exit 0; SIGHUP syncs and closes the files (new ones are opened as messages come).
Differences from NSQ's: topics are looked up at start as well as every ``--topic-refresh``;
a ``--topic`` whose nsqd cannot be reached, an invalid ``--topic-pattern``, a missing
``<REV>`` and a bad ``--consumer-opt`` are fatal rather than logged.
"""

import re
import signal

import anyio

from common import lg
from common.goflags import Flag
from nsqclient import Config
from serving.logs import nsq_logger

from . import golog, options
from .channel_stats import cluster_info
from .consuming import make_consumer
from .file_logger import FileLogger
from .flagset import FlagSet
from .golog import Fatal
from .output_file import OutputFile, filename_format
from .running import fatal_exit, run, watch_signals
from .topic_discoverer import TopicDiscoverer

PROGRAM = "nsq_to_file"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# NSQ names this flag set "nsqd", so its usage reads "Usage of nsqd:"
FLAGS = FlagSet("nsqd", [
    options.VERSION_FLAG,
    Flag("log-level", "str", "info", "set log verbosity: debug, info, warn, error, or fatal"),
    Flag("log-prefix", "str", "[nsq_to_file] ", "log message prefix"),
    Flag("channel", "str", "nsq_to_file", "nsq channel"),
    options.MAX_IN_FLIGHT,
    Flag("output-dir", "str", "/tmp", "directory to write output files to"),
    Flag("work-dir", "str", "", "directory for in-progress files before moving to output-dir"),
    Flag("datetime-format", "str", "%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format"),
    Flag("filename-format", "str", "<TOPIC>.<HOST><REV>.<DATETIME>.log",
         "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
         "<REV> is increased when file already exists)"),
    Flag("host-identifier", "str", "", "value to output in log filename in place of hostname. "
         "<SHORT_HOST> and <HOSTNAME> are valid replacement tokens"),
    Flag("gzip-level", "int", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)"),
    Flag("gzip", "bool", False, "gzip output files."),
    Flag("skip-empty-files", "bool", False, "skip writing empty files"),
    Flag("topic-refresh", "duration", 60.0, "how frequently the topic list should be refreshed"),
    Flag("topic-pattern", "str", "", "only log topics matching the following pattern"),
    Flag("rotate-size", "int", 0, "rotate the file when it grows bigger than `rotate-size` bytes"),
    Flag("rotate-interval", "duration", 0.0, "rotate the file every duration"),
    Flag("sync-interval", "duration", 30.0, "sync file to disk every duration"),
    options.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request"),
    options.NSQD_TCP_ADDRESS,
    options.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", "list", [], "nsq topic (may be given multiple times)"),
    options.CONSUMER_OPT,
])


def _validate(opts) -> re.Pattern | None:
    """NSQ's checks, in its order; the compiled ``--topic-pattern``."""
    if not opts.channel:
        raise Fatal("--channel is required")
    for name in ("http_client_connect_timeout", "http_client_request_timeout"):
        if getattr(opts, name) <= 0:
            raise Fatal(f"--{name.replace('_', '-')} should be positive")
    if not opts.nsqd_tcp_address and not opts.lookupd_http_address:
        raise Fatal("--nsqd-tcp-address or --lookupd-http-address required.")
    if opts.nsqd_tcp_address and opts.lookupd_http_address:
        raise Fatal("use --nsqd-tcp-address or --lookupd-http-address not both")
    if not 1 <= opts.gzip_level <= 9:
        raise Fatal(f"invalid --gzip-level value ({opts.gzip_level}), should be 1-9")
    if not opts.topic and not opts.topic_pattern:
        raise Fatal("--topic or --topic-pattern required")
    if not opts.topic and not opts.lookupd_http_address:
        raise Fatal("--lookupd-http-address must be specified when no --topic specified")
    if not opts.work_dir:
        opts.work_dir = opts.output_dir
    try:
        filename_format(opts, "")
        return re.compile(opts.topic_pattern) if opts.topic_pattern else None
    except (ValueError, re.error) as exc:
        raise Fatal(f"{'--topic-pattern: ' if isinstance(exc, re.error) else ''}{exc}") from None


class NSQToFile:
    def __init__(self, opts, config: Config, log):
        self.opts = opts
        self.config = config
        self.log = log
        self.loggers: dict[str, FileLogger] = {}
        # loggers whose consumer is starting (and may already be writing): a SIGHUP reaches them too,
        # as NSQ's discoverer, busy adding a topic, handles the signal once the topic's logger is listed
        self.starting: list[FileLogger] = []
        self.stopping = False
        self.failed = False
        self.task_group = None
        self.discovery = anyio.CancelScope()

    async def run(self, pattern: re.Pattern | None) -> int:
        cluster = None
        if self.opts.lookupd_http_address:
            cluster = cluster_info([], self.opts.lookupd_http_address, self.opts.http_client_connect_timeout,
                                   self.opts.http_client_request_timeout)
        discoverer = TopicDiscoverer(self.opts.topic, pattern, self.opts.topic_refresh, cluster, self.add_topic,
                                     self.log)
        async with anyio.create_task_group() as outer:
            await outer.start(watch_signals, self.on_signal, SIGNALS)
            async with anyio.create_task_group() as loggers:
                self.task_group = loggers
                with self.discovery:
                    await discoverer.run()
            outer.cancel_scope.cancel()
        return 1 if self.failed else 0

    async def add_topic(self, topic: str) -> bool:
        """Start archiving ``topic``; False (logged) if its consumer cannot start."""
        output = OutputFile(self.opts, topic, self.opts.channel, filename_format(self.opts, topic), self.log)
        logger = FileLogger(output, self.opts.max_in_flight, self.opts.sync_interval, self.opts.skip_empty_files,
                            self.log, self.on_fatal)
        consumer = make_consumer(topic, self.opts.channel, logger, self.opts.nsqd_tcp_address,
                                 self.opts.lookupd_http_address, config=self.config)
        logger.consumer = consumer
        self.starting.append(logger)
        try:
            await self.task_group.start(consumer.run)
        finally:
            self.starting.remove(logger)
        unreachable = [a for a in self.opts.nsqd_tcp_address if a not in consumer.connections]
        if unreachable:
            consumer.stop()
            reason = f"failed to connect to nsqd at {unreachable[0]}"
            if self.opts.topic:
                raise Fatal(reason)
            self.log.error("couldn't create logger for new topic %s: %s", topic, reason)
            return False
        self.loggers[topic] = logger
        await self.task_group.start(logger.run)
        if self.stopping:
            logger.stop()
        return True

    def on_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            for logger in [*self.loggers.values(), *self.starting]:
                logger.hup()
            return
        self.stopping = True
        self.discovery.cancel()
        for logger in self.loggers.values():
            logger.stop()

    def on_fatal(self) -> None:
        self.failed = True
        self.task_group.cancel_scope.cancel()
        self.discovery.cancel()


async def _nsq_to_file(opts) -> int:
    pattern = _validate(opts)
    log = nsq_logger(PROGRAM, opts.log_level, opts.log_prefix)
    config = options.client_config(opts.consumer_opt, PROGRAM, max_in_flight=opts.max_in_flight)
    return await NSQToFile(opts, config, log).run(pattern)


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.args:
        return fatal_exit(f"unknown arguments: [{' '.join(opts.args)}]")
    opts.log_level = opts.log_level.lower()
    if opts.log_level not in lg.LEVELS:
        return fatal_exit("--log-level is invalid")
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    golog.setup_client_log()
    return run(_nsq_to_file, opts)
