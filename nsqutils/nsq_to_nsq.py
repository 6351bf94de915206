"""nsq_to_nsq: relay topics from one set of nsqd to another (apps/nsq_to_nsq/nsq_to_nsq.go).

Each message consumed is PUBlished to one ``--destination-nsqd-tcp-address`` (picked by
``--mode``: ``round-robin``, or ``hostpool`` / ``epsilon-greedy`` passing over those that
failed lately), to ``--destination-topic`` or else the topic it came from. It is finished
once the destination nsqd took it, requeued if the publish failed. Publishes are pipelined:
the handler starts one and takes the next message. ``--require-json-*`` and
``--whitelist-json-field`` filter and reshape JSON messages (:mod:`.json_filter`); a message
that is not a JSON object is then logged and dropped. Timings are logged every
``--status-every`` publishes.
"""

import time
from contextlib import AsyncExitStack

import anyio

from common import gojson
from common.goflags import Flag
from common.names import is_valid_name
from nsqclient import Config, Message, NSQError, Producer

from . import golog, json_filter, options
from .consuming import consume, make_consumer
from .flagset import FlagSet
from .golog import Fatal
from .hostpool import host_pool
from .running import run
from .timer_metrics import TimerMetrics, address_metrics

PROGRAM = "nsq_to_nsq"
SEE_GODOC = f"see {options.GODOC}"
FLAGS = FlagSet(PROGRAM, [
    options.VERSION_FLAG,
    Flag("channel", "str", "nsq_to_nsq", "nsq channel"),
    Flag("destination-topic", "str", "",
         "use this destination topic for all consumed topics (default is consumed topic name)"),
    options.MAX_IN_FLIGHT,
    Flag("status-every", "int", 250, "the # of requests between logging status (per destination), 0 disables"),
    options.MODE,
    options.NSQD_TCP_ADDRESS,
    Flag("destination-nsqd-tcp-address", "list", [], "destination nsqd TCP address (may be given multiple times)"),
    options.LOOKUPD_HTTP_ADDRESS,
    Flag("topic", "list", [], "nsq topic (may be given multiple times)"),
    Flag("whitelist-json-field", "list", [], "for JSON messages: pass this field (may be given multiple times)"),
    Flag("require-json-field", "str", "", "for JSON messages: only pass messages that contain this field"),
    Flag("require-json-value", "str", "",
         "for JSON messages: only pass messages in which the required field has this value"),
    Flag("consumer-opt", "value", Config,
         f"option to passthrough to nsq.Consumer (may be given multiple times, {SEE_GODOC})"),
    Flag("producer-opt", "value", Config,
         f"option to passthrough to nsq.Producer (may be given multiple times, {SEE_GODOC})"),
])


class Backoff(Exception):
    """A message the filter wants requeued with backoff."""


class Relay:
    """Publishes what every topic's consumer receives; one per process (NSQ's PublishHandler)."""

    def __init__(self, opts, producers: dict[str, Producer], task_group):
        self.opts = opts
        self.producers = producers
        self.addresses = list(producers)
        self.task_group = task_group
        self.counter = 0
        self.pool = host_pool(opts.mode, self.addresses)
        self.per_address = address_metrics(self.addresses, opts.status_every)
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")
        self.filtering = bool(opts.require_json_field or opts.whitelist_json_field)

    def handler(self, destination_topic: str):
        async def handle(message: Message) -> None:
            await self.handle(message, destination_topic)
        return handle

    async def handle(self, message: Message, destination_topic: str) -> None:
        body = message.body
        if self.filtering:
            body = self.filtered(body)
            if body is None:
                return
        message.disable_auto_response()
        started = time.monotonic_ns()
        if self.opts.mode == "round-robin":
            self.counter += 1
            address, chosen = self.addresses[self.counter % len(self.addresses)], None
        else:
            chosen = self.pool.get()
            address = chosen.address
        self.task_group.start_soon(self.publish, message, destination_topic, body, address, chosen, started)

    def filtered(self, body: bytes) -> bytes | None:
        """The body to publish; None to drop the message; Backoff to requeue it."""
        try:
            decoded = gojson.unmarshal_value(body)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            golog.printf(f"ERROR: Unable to decode json: {body.decode('utf-8', 'replace')}")
            return None
        verdict = json_filter.check(decoded, self.opts.require_json_field, self.opts.require_json_value)
        if verdict.backoff:
            golog.printf("ERROR: missing field to check required value")
            raise Backoff("backoff")
        if not verdict.passes:
            return None
        if not self.opts.whitelist_json_field:
            return body
        return json_filter.whitelisted(decoded, self.opts.whitelist_json_field)

    async def publish(self, message: Message, topic: str, body: bytes, address: str, chosen, started: int) -> None:
        try:
            await self.producers[address].publish(topic, body)
            error = None
        except NSQError as exc:
            error = exc
            golog.printf(f"ERROR: publishing to {address} failed - {exc}")
        if chosen is not None:
            chosen.mark(error)
        if error is None:
            message.finish()
        else:
            message.requeue()
        self.per_address[address].status(started)
        self.aggregate.status(started)


def _validate(opts) -> None:
    """NSQ's checks, in its order."""
    if not opts.topic or not opts.channel:
        raise Fatal("--topic and --channel are required")
    if not all(is_valid_name(topic) for topic in opts.topic):
        raise Fatal("--topic is invalid")
    if opts.destination_topic and not is_valid_name(opts.destination_topic):
        raise Fatal("--destination-topic is invalid")
    if not is_valid_name(opts.channel):
        raise Fatal("--channel is invalid")
    options.check_sources(opts.nsqd_tcp_address, opts.lookupd_http_address)
    if not opts.destination_nsqd_tcp_address:
        raise Fatal("--destination-nsqd-tcp-address required")
    options.check_mode(opts.mode)


async def _nsq_to_nsq(opts) -> None:
    _validate(opts)
    consumer_config = options.client_config(opts.consumer_opt, PROGRAM, max_in_flight=opts.max_in_flight)
    producer_config = options.client_config(opts.producer_opt, PROGRAM)
    destinations = list(dict.fromkeys(opts.destination_nsqd_tcp_address))
    try:
        producers = {address: Producer(address, producer_config) for address in destinations}
    except ValueError as exc:
        raise Fatal(f"failed creating producer {exc}") from None
    async with AsyncExitStack() as stack:
        for producer in producers.values():
            await stack.enter_async_context(producer)
        async with anyio.create_task_group() as publishes:
            relay = Relay(opts, producers, publishes)
            consumers = [make_consumer(topic, opts.channel, relay.handler(opts.destination_topic or topic),
                                       opts.nsqd_tcp_address, opts.lookupd_http_address,
                                       concurrency=len(destinations), config=consumer_config)
                         for topic in opts.topic]
            await consume(consumers, opts.nsqd_tcp_address)


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    golog.setup_client_log()
    return run(_nsq_to_nsq, opts)
