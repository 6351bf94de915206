"""nsq_to_http: consume a topic and send each message to HTTP endpoints
(apps/nsq_to_http/nsq_to_http.go).

``--post URL``: the body is POSTed (``--content-type``), any 2xx is success. ``--get URL``:
the one ``%s`` in the URL is replaced by the query-escaped body, only 200 is success. With
several URLs, ``--mode`` picks one per message: ``round-robin`` in turn, ``hostpool`` (or
``epsilon-greedy``) in turn passing over those that failed lately. A failed request is an
error from the handler: the message is requeued and the consumer backs off. ``-n`` requests
run at once; ``--sample`` sends only that fraction of messages (the others are finished);
timings are logged every ``--status-every`` requests.
"""

import random
import time
from urllib.parse import quote_from_bytes

import anyio
import httpx

from common import VERSION
from common.goflags import Flag
from nsqclient import Message

from . import golog, options
from .consuming import consume, make_consumer
from .flagset import FlagSet
from .golog import Fatal
from .hostpool import host_pool
from .running import run
from .timer_metrics import TimerMetrics, address_metrics

PROGRAM = "nsq_to_http"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
FLAGS = FlagSet(PROGRAM, [
    options.VERSION_FLAG,
    Flag("topic", "str", "", "nsq topic"),
    Flag("channel", "str", "nsq_to_http", "nsq channel"),
    options.MAX_IN_FLIGHT,
    Flag("n", "int", 100, "number of concurrent publishers"),
    options.MODE,
    Flag("sample", "float", 1.0, "% of messages to publish (float b/w 0 -> 1)"),
    options.HTTP_CONNECT_TIMEOUT,
    Flag("http-client-request-timeout", "duration", 20.0, "timeout for HTTP request"),
    Flag("status-every", "int", 250, "the # of requests between logging status (per handler), 0 disables"),
    Flag("content-type", "str", DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests"),
    Flag("post", "list", [], "HTTP address to make a POST request to.  data will be in the body "
         "(may be given multiple times)"),
    Flag("header", "list", [], "Custom header for HTTP requests (may be given multiple times)"),
    Flag("get", "list", [], "HTTP address to make a GET request to. '%s' will be printf replaced with data "
         "(may be given multiple times)"),
    options.NSQD_TCP_ADDRESS,
    options.LOOKUPD_HTTP_ADDRESS,
    options.CONSUMER_OPT,
])


class RequestFailed(Exception):
    """The endpoint answered with a status that is not success."""


def query_escape(body: bytes) -> str:
    """Go's url.QueryEscape of the raw bytes."""
    return quote_from_bytes(body, safe="").replace("%20", "+")


TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def canonical_header(name: str) -> str:
    """Go's CanonicalMIMEHeaderKey: ``x-one`` -> ``X-One``; a name that is not a token stays as it is."""
    if not set(name) <= TOKEN:
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def parse_headers(values: list[str]) -> dict[str, str]:
    """``--header 'Name: value'`` values, by canonical name (the last wins, as Go's Header.Set);
    ValueError for one without a name or a value."""
    headers = {}
    for value in values:
        name, colon, text = value.partition(":")
        if not colon or not name.strip() or not text.strip():
            raise ValueError(f"invalid header {value!r}")
        headers[canonical_header(name.strip())] = text.strip()
    return headers


class Publisher:
    """One GET or POST per message to the address the mode picks, with the header lines Go's
    http.Client writes, in its order: Host, User-Agent, Content-Length (POST), the others sorted
    by name (Content-Type for POST, then the ``--header`` ones, which may replace it or the
    User-Agent), Accept-Encoding: gzip."""

    def __init__(self, opts, client: httpx.AsyncClient, headers: dict[str, str]):
        self.get = bool(opts.get)
        self.addresses = opts.get or opts.post
        self.mode = opts.mode
        self.sample = opts.sample
        self.timeout = opts.http_client_request_timeout
        self.client = client
        headers = {"User-Agent": f"{PROGRAM} v{VERSION}", **({} if self.get else {"Content-Type": opts.content_type}),
                   **headers}
        self.user_agent = headers.pop("User-Agent")
        self.headers = sorted(headers.items())
        self.counter = 0
        self.pool = host_pool(self.mode, self.addresses)
        self.per_address = address_metrics(self.addresses, opts.status_every)
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:")

    async def __call__(self, message: Message) -> None:
        if self.sample < 1.0 and random.random() > self.sample:
            return
        started = time.monotonic_ns()
        if self.mode == "round-robin":
            self.counter += 1
            address = self.addresses[self.counter % len(self.addresses)]
            await self.send(address, message.body)
        else:
            chosen = self.pool.get()
            address = chosen.address
            try:
                await self.send(address, message.body)
            except Exception as exc:
                chosen.mark(exc)
                raise
            chosen.mark(None)
        self.per_address[address].status(started)
        self.aggregate.status(started)

    async def send(self, address: str, body: bytes) -> None:
        if self.get:
            request = self.client.build_request("GET", address.replace("%s", query_escape(body), 1))
            length = []
        else:
            request = self.client.build_request("POST", address, content=body)
            length = [("Content-Length", str(len(body)))]
        request.headers = httpx.Headers([("Host", request.headers["Host"]), ("User-Agent", self.user_agent), *length,
                                         *self.headers, ("Accept-Encoding", "gzip")])
        with anyio.fail_after(self.timeout):
            response = await self.client.send(request)
        if not (response.status_code == 200 if self.get else 200 <= response.status_code < 300):
            raise RequestFailed(f"got status code {response.status_code}")


def _validate(opts) -> dict[str, str]:
    """NSQ's checks, in its order; the custom headers."""
    if not opts.topic or not opts.channel:
        raise Fatal("--topic and --channel are required")
    if opts.content_type != DEFAULT_CONTENT_TYPE:
        if not opts.post:
            raise Fatal("--content-type only used with --post")
        if not opts.content_type:
            raise Fatal("--content-type requires a value when used")
    options.check_sources(opts.nsqd_tcp_address, opts.lookupd_http_address)
    if not opts.get and not opts.post:
        raise Fatal("--get or --post required")
    if opts.get and opts.post:
        raise Fatal("use --get or --post not both")
    if any(address.count("%s") != 1 for address in opts.get):
        raise Fatal("invalid GET address - must be a printf string")
    try:
        headers = parse_headers(opts.header)
    except ValueError:
        raise Fatal("--header value format should be 'key=value'") from None
    options.check_mode(opts.mode)
    if not 0.0 <= opts.sample <= 1.0:
        raise Fatal("ERROR: --sample must be between 0.0 and 1.0")
    if opts.n < 1:
        raise Fatal("-n must be at least 1")
    return headers


async def _nsq_to_http(opts) -> None:
    headers = _validate(opts)
    config = options.client_config(opts.consumer_opt, PROGRAM, max_in_flight=opts.max_in_flight)
    timeout = httpx.Timeout(opts.http_client_request_timeout, connect=opts.http_client_connect_timeout)
    limits = httpx.Limits(max_connections=opts.n, max_keepalive_connections=opts.n)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        publisher = Publisher(opts, client, headers)
        consumer = make_consumer(opts.topic, opts.channel, publisher, opts.nsqd_tcp_address,
                                 opts.lookupd_http_address, concurrency=opts.n, config=config)
        await consume([consumer], opts.nsqd_tcp_address)


def main(argv: list[str] | None = None) -> int:
    opts = FLAGS.parse(argv)
    if opts.version:
        print(options.version_line(PROGRAM))
        return 0
    golog.setup_client_log()
    return run(_nsq_to_http, opts)
