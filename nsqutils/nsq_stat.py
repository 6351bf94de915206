"""nsq_stat: poll ``/stats`` of every nsqd that has a topic and print a channel's numbers
summed over them, one line per ``--interval`` (apps/nsq_stat/nsq_stat.go).

The first poll only prints the header; each later one prints the rates since the poll
before (messages per second in and out, as whole numbers) and the channel's counters. The
header is printed again every 25 polls; ``--count N`` stops after N lines of numbers.
"""

import anyio

from common.goflags import Flag

from . import options
from .channel_stats import cluster_info, fetch_channel
from .flagset import FlagSet
from .golog import Fatal
from .running import die_on_broken_stdout, run, watch_signals, write_stdout

PROGRAM = "nsq_stat"
HEADER_EVERY = 25
FLAGS = FlagSet(PROGRAM, [
    Flag("version", "bool", False, "print version"),
    Flag("topic", "str", "", "NSQ topic"),
    Flag("channel", "str", "", "NSQ channel"),
    Flag("interval", "duration", 2.0, "duration of time between polling/printing output"),
    options.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request"),
    Flag("count", "count", None, "number of reports"),
    Flag("nsqd-http-address", "list", [], "nsqd HTTP address (may be given multiple times)"),
    options.LOOKUPD_HTTP_ADDRESS,
])


def header() -> str:
    return ("------rate------+----------------depth----------------+--------------metadata---------------\n"
            + "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
                "ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients"))


def row(current: dict, previous: dict, interval: float) -> str:
    """One poll's line: rates from the change since ``previous``, then ``current``'s counters."""
    received = current["message_count"] - previous["message_count"]
    sent = received - (current["depth"] - previous["depth"])
    return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
        int(received / interval), int(sent / interval),
        current["depth"], current["memory_depth"], current["backend_depth"], current["in_flight_count"],
        current["deferred_count"], current["requeue_count"], current["timeout_count"], current["message_count"],
        current["client_count"])


def _validate(opts) -> None:
    if not opts.topic or not opts.channel:
        raise Fatal("--topic and --channel are required")
    for name in ("interval", "http_client_connect_timeout", "http_client_request_timeout"):
        if getattr(opts, name) <= 0:
            raise Fatal(f"--{name.replace('_', '-')} should be positive")
    if opts.count is not None and opts.count <= 0:
        raise Fatal("--count should be positive")
    options.check_sources(opts.nsqd_http_address, opts.lookupd_http_address, "--nsqd-http-address")
    for flag, addresses in (("--nsqd-http-address", opts.nsqd_http_address),
                            ("--lookupd-http-address", opts.lookupd_http_address)):
        if any(address.startswith("http") for address in addresses):
            raise Fatal(f"{flag} error - address should not contain scheme")


async def _stat_loop(opts) -> None:
    cluster = cluster_info(opts.nsqd_http_address, opts.lookupd_http_address,
                           opts.http_client_connect_timeout, opts.http_client_request_timeout)
    previous = None
    poll = 0
    try:
        while opts.count is None or poll <= opts.count:
            current = await fetch_channel(cluster, opts.topic, opts.channel)
            if poll % HEADER_EVERY == 0:
                write_stdout(header().encode())
            if previous is not None:
                write_stdout(row(current, previous, opts.interval).encode())
            previous = current
            poll += 1
            if opts.count is None or poll <= opts.count:
                await anyio.sleep(opts.interval)
    finally:
        with anyio.CancelScope(shield=True):
            await cluster.upstream.aclose()


async def _nsq_stat(opts) -> None:
    _validate(opts)
    async with anyio.create_task_group() as task_group:
        await task_group.start(watch_signals, lambda signum: task_group.cancel_scope.cancel())
        await _stat_loop(opts)
        task_group.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    die_on_broken_stdout()
    return run(_nsq_stat, opts)
