"""nsq_tail: consume topics and print each message's body on a line of stdout, in the spirit
of tail(1) (apps/nsq_tail/nsq_tail.go).

``-n N`` stops after N messages of a topic (Go counts per topic), having finished them;
``--print-topic`` prefixes each line with ``<topic> | ``; without ``--channel`` the channel
is a new ephemeral one, ``tail<6 digits>#ephemeral``.
"""

import random

from common.goflags import Flag
from nsqclient import Message

from . import golog, options
from .consuming import consume, make_consumer
from .flagset import FlagSet
from .golog import Fatal
from .running import die_on_broken_stdout, run, write_stdout

PROGRAM = "nsq_tail"
FLAGS = FlagSet(PROGRAM, [
    options.VERSION_FLAG,
    Flag("channel", "str", "", "NSQ channel"),
    options.MAX_IN_FLIGHT,
    Flag("n", "int", 0, "total messages to show (will wait if starved)"),
    Flag("print-topic", "bool", False, "print topic name where message was received"),
    options.NSQD_TCP_ADDRESS,
    options.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", "list", [], "NSQ topic (may be given multiple times)"),
    options.CONSUMER_OPT,
])


class TailHandler:
    """One topic's lines; asks for the stop once ``total`` of them are shown."""

    def __init__(self, topic: str, print_topic: bool, total: int, stop):
        self.prefix = f"{topic} | ".encode() if print_topic else b""
        self.total = total
        self.shown = 0
        self.stop = stop

    async def __call__(self, message: Message) -> None:
        if self.total and self.shown >= self.total:
            message.requeue(0, backoff=False)  # taken after the last wanted one: give it back
            return
        self.shown += 1
        write_stdout(self.prefix + message.body + b"\n")
        if self.total and self.shown >= self.total:
            message.finish()
            self.stop()


def _validate(opts) -> None:
    options.check_sources(opts.nsqd_tcp_address, opts.lookupd_http_address)
    if not opts.topic:
        raise Fatal("--topic required")


async def _tail(opts) -> None:
    _validate(opts)
    channel = opts.channel or f"tail{random.randrange(999999):06d}#ephemeral"
    max_in_flight = opts.n if 0 < opts.n < opts.max_in_flight else opts.max_in_flight
    config = options.client_config(opts.consumer_opt, PROGRAM, max_in_flight=max_in_flight)
    consumers = []

    def stop_all() -> None:
        for consumer in consumers:
            consumer.stop()

    for topic in opts.topic:
        golog.printf(f"Adding consumer for topic: {topic}")
        handler = TailHandler(topic, opts.print_topic, opts.n, stop_all)
        consumers.append(make_consumer(topic, channel, handler, opts.nsqd_tcp_address,
                                       opts.lookupd_http_address, config=config))
    await consume(consumers, opts.nsqd_tcp_address)


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    die_on_broken_stdout()
    golog.setup_client_log()
    return run(_tail, opts)
