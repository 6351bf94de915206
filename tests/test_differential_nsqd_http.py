"""nsqd's HTTP API, every route with good and bad parameters, methods and bodies, against NSQ's nsqd
and ours side by side (tests/differential_driver.py): status, headers (but Date and Content-Length)
and body equal after normalising, and /stats equal after every request."""

import pytest

from nsqd.options import FLAGS as NSQD_FLAGS

from .differential_driver import command, identify, mpub_body, nsqd_pair_fixture
from .differential_driver import pair  # noqa: F401 (a fixture the tests use)
from .go_nsq import requires_go

pytestmark = requires_go

FLAGS = ("--max-msg-size=1024", "--max-body-size=4096", "--max-req-timeout=10m", "--mem-queue-size=100",
         "--e2e-processing-latency-percentile=1.0,0.5", "--statsd-prefix=nsq.%s.x")


nsqd_pair = nsqd_pair_fixture(*FLAGS)


def requests(pair, *calls) -> None:
    for call in calls:
        pair.http(*call)


# -- routing, methods, health ------------------------------------------------------------------

ROUTES = ["/ping", "/info", "/pub", "/mpub", "/stats", "/topic/create", "/topic/delete", "/topic/empty",
          "/topic/pause", "/topic/unpause", "/channel/create", "/channel/delete", "/channel/empty",
          "/channel/pause", "/channel/unpause", "/config/log_level", "/debug/freememory"]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("path", ROUTES)
def test_every_route_with_every_method(pair, path, method):
    """Without arguments: the route's own missing-argument answer, or 405, or what it does."""
    if (method, path) == ("PUT", "/config/log_level"):
        pair.http(method, path, b"info")
    elif (method, path) != ("POST", "/debug/freememory"):  # test_free_memory
        pair.http(method, path)


@pytest.mark.parametrize("path", ["/", "/nope", "/ping/", "/PING", "/Ping/", "/ping/x", "/./ping", "/x/../ping",
                                  "/topic", "/topic/",
                                  "/topic/nope", "/config", "/config/", "/config/a/b", "/stats/", "/info?x=1",
                                  "/ping?", "/pub/", "/Pub?topic=x", "/debug", "/debug/nope", "/CONFIG/Log_Level",
                                  "/config/log_level/", "/STATS/?format=json&topic=x"])
def test_unknown_and_near_paths(pair, path):
    for method in ("GET", "POST", "HEAD", "OPTIONS"):
        pair.http(method, path)


# -- publishing --------------------------------------------------------------------------------

PUBS = {
    "ok": ("/pub?topic=h_pub", b"hello"),
    "no topic": ("/pub", b"x"),
    "empty topic": ("/pub?topic=", b"x"),
    "bad topic": ("/pub?topic=a/b", b"x"),
    "long topic": ("/pub?topic=" + "t" * 65, b"x"),
    "two topics": ("/pub?topic=h_pub&topic=other", b"x"),
    "escaped topic": ("/pub?topic=h%5Fpub", b"x"),
    "bad escape": ("/pub?topic=h%zz", b"x"),
    "semicolon": ("/pub?topic=h_pub;x=1", b"x"),
    "plus": ("/pub?topic=h+pub", b"x"),
    "empty body": ("/pub?topic=h_pub", b""),
    "body at max": ("/pub?topic=h_pub", b"m" * 1024),
    "body over max": ("/pub?topic=h_pub", b"m" * 1025),
    "body over max, bad topic": ("/pub?topic=b@d", b"m" * 1025),
    "empty body, bad topic": ("/pub?topic=b@d", b""),
    "binary body": ("/pub?topic=h_pub", bytes(range(256))),
    "defer": ("/pub?topic=h_pub&defer=300000", b"later"),
    "defer 0": ("/pub?topic=h_pub&defer=0", b"now"),
    "defer max": ("/pub?topic=h_pub&defer=600000", b"x"),
    "defer over max": ("/pub?topic=h_pub&defer=600001", b"x"),
    "defer negative": ("/pub?topic=h_pub&defer=-1", b"x"),
    "defer plus": ("/pub?topic=h_pub&defer=%2B5", b"x"),
    "defer word": ("/pub?topic=h_pub&defer=soon", b"x"),
    "defer empty": ("/pub?topic=h_pub&defer=", b"x"),
    "defer float": ("/pub?topic=h_pub&defer=1.5", b"x"),
    "defer huge": ("/pub?topic=h_pub&defer=99999999999999999999", b"x"),
    "defer, bad topic": ("/pub?topic=b@d&defer=x", b"x"),
    "ephemeral topic": ("/pub?topic=h_pub%23ephemeral", b"x"),
}


@pytest.mark.parametrize("path,body", PUBS.values(), ids=PUBS.keys())
def test_pub(pair, path, body):
    pair.http("POST", path, body)


MPUBS = {
    "lines": ("/mpub?topic=h_mpub", b"a\nbb\nccc"),
    "trailing newline": ("/mpub?topic=h_mpub", b"a\nb\n"),
    "empty lines": ("/mpub?topic=h_mpub", b"\n\na\n\n\nb\n\n"),
    "only newlines": ("/mpub?topic=h_mpub", b"\n\n\n"),
    "crlf": ("/mpub?topic=h_mpub", b"a\r\nb\r\n"),
    "empty body": ("/mpub?topic=h_mpub", b""),
    "one line at max": ("/mpub?topic=h_mpub", b"m" * 1024 + b"\nx"),
    "one line over max": ("/mpub?topic=h_mpub", b"m" * 1025 + b"\nx"),
    "body over max": ("/mpub?topic=h_mpub", (b"m" * 1000 + b"\n") * 5),
    "no topic": ("/mpub", b"a"),
    "bad topic": ("/mpub?topic=no!", b"a"),
    "binary": ("/mpub?topic=h_mpub&binary=true", mpub_body(b"a", b"b\nc")),
    "binary=1": ("/mpub?topic=h_mpub&binary=1", mpub_body(b"a")),
    "binary=false": ("/mpub?topic=h_mpub&binary=false", mpub_body(b"a")),
    "binary=yes": ("/mpub?topic=h_mpub&binary=yes", mpub_body(b"a")),
    "binary=": ("/mpub?topic=h_mpub&binary=", mpub_body(b"a")),
    "binary zero messages": ("/mpub?topic=h_mpub&binary=true", mpub_body()),
    "binary short": ("/mpub?topic=h_mpub&binary=true", b"\x00\x00"),
    "binary empty message": ("/mpub?topic=h_mpub&binary=true", mpub_body(b"a", b"")),
    "binary message over max": ("/mpub?topic=h_mpub&binary=true", mpub_body(b"m" * 1025)),
    "binary sizes past the end": ("/mpub?topic=h_mpub&binary=true", mpub_body(b"abc")[:-1]),
    "binary trailing bytes": ("/mpub?topic=h_mpub&binary=true", mpub_body(b"abc") + b"zz"),
    "binary negative count": ("/mpub?topic=h_mpub&binary=true", b"\xff\xff\xff\xff"),
    "binary empty body": ("/mpub?topic=h_mpub&binary=true", b""),
}


@pytest.mark.parametrize("path,body", MPUBS.values(), ids=MPUBS.keys())
def test_mpub(pair, path, body):
    pair.http("POST", path, body)


def test_http_publishing_delivers_to_consumers(pair):
    pair.connect("c1")
    pair.send("c1", identify(output_buffer_timeout=25))
    pair.send("c1", command("SUB h_deliver ch"))
    pair.send("c1", command("RDY 10"))
    requests(pair, ("POST", "/pub?topic=h_deliver", b"one"), ("POST", "/mpub?topic=h_deliver", b"two\nthree"),
             ("POST", "/mpub?topic=h_deliver&binary=true", mpub_body(b"four")),
             ("POST", "/pub?topic=h_deliver&defer=0", b"five"))
    pair.send("c1", command("FIN <m0>") + command("FIN <m1>") + command("FIN <m2>") + command("FIN <m3>")
              + command("FIN <m4>"))


# -- topics and channels -------------------------------------------------------------------------

TOPIC_ACTIONS = ["create", "pause", "unpause", "empty", "delete"]
CHANNEL_ACTIONS = ["create", "pause", "unpause", "empty", "delete"]


@pytest.mark.parametrize("action", TOPIC_ACTIONS)
@pytest.mark.parametrize("query", ["", "?topic=", "?topic=b@d", "?topic=h_absent", "?topic=" + "t" * 65,
                                   "?topic=h_absent%23ephemeral", "?topic=%zz", "?topic=a;b"])
def test_topic_actions_with_bad_arguments(pair, action, query):
    pair.http("POST", f"/topic/{action}{query}")


@pytest.mark.parametrize("action", CHANNEL_ACTIONS)
@pytest.mark.parametrize("query", ["", "?topic=h_chan", "?channel=c", "?topic=b@d&channel=c",
                                   "?topic=h_chan&channel=b@d",
                                   "?topic=h_absent&channel=c", "?topic=h_chan&channel=absent",
                                   "?topic=h_chan&channel=", "?topic=&channel=c"])
def test_channel_actions_with_bad_arguments(pair, action, query):
    pair.http("POST", "/topic/create?topic=h_chan")
    pair.http("POST", f"/channel/{action}{query}")


def test_topic_and_channel_lifecycle(pair):
    requests(pair,
             ("POST", "/topic/create?topic=h_life"), ("POST", "/topic/create?topic=h_life"),
             ("POST", "/pub?topic=h_life", b"held by the topic"),
             ("POST", "/channel/create?topic=h_life&channel=a"), ("POST", "/channel/create?topic=h_life&channel=b"),
             ("POST", "/channel/create?topic=h_life&channel=e%23ephemeral"),
             ("POST", "/topic/pause?topic=h_life"), ("POST", "/topic/pause?topic=h_life"),
             ("POST", "/pub?topic=h_life", b"held while paused"),
             ("POST", "/topic/empty?topic=h_life"),
             ("POST", "/topic/unpause?topic=h_life"), ("POST", "/topic/unpause?topic=h_life"),
             ("POST", "/pub?topic=h_life", b"to the channels"),
             ("POST", "/channel/pause?topic=h_life&channel=a"), ("POST", "/channel/pause?topic=h_life&channel=a"),
             ("POST", "/channel/empty?topic=h_life&channel=a"),
             ("POST", "/channel/unpause?topic=h_life&channel=a"),
             ("POST", "/channel/delete?topic=h_life&channel=b"), ("POST", "/channel/delete?topic=h_life&channel=b"),
             ("POST", "/channel/delete?topic=h_life&channel=e%23ephemeral"),
             ("POST", "/topic/delete?topic=h_life"), ("POST", "/topic/delete?topic=h_life"))


def test_ephemeral_topic_goes_with_its_last_channel(pair):
    requests(pair, ("POST", "/topic/create?topic=h_eph%23ephemeral"),
             ("POST", "/channel/create?topic=h_eph%23ephemeral&channel=c"),
             ("POST", "/channel/delete?topic=h_eph%23ephemeral&channel=c"),
             ("GET", "/stats?format=json&topic=h_eph%23ephemeral"))


def test_deleting_a_channel_with_a_consumer(pair):
    pair.connect("c1")
    pair.send("c1", command("SUB h_del ch"))
    pair.http("POST", "/channel/delete?topic=h_del&channel=ch")
    pair.hang_up("c1")


# -- /stats ----------------------------------------------------------------------------------------

STATS_QUERIES = ["", "?format=json", "?format=text", "?format=JSON", "?format=other",
                 "?format=json&include_clients=false",
                 "?format=json&include_clients=0", "?format=json&include_clients=no", "?include_clients=false",
                 "?format=json&include_mem=false", "?include_mem=false", "?format=json&include_mem=1",
                 "?format=json&topic=h_stats", "?format=json&topic=h_absent", "?format=json&topic=h_stats&channel=a",
                 "?format=json&topic=h_stats&channel=absent", "?format=json&channel=a", "?topic=h_stats&channel=a",
                 "?topic=h_absent", "?format=json&topic=", "?format=json&topic=b@d", "?format=json&x=%zz",
                 "?format=json&topic=h_stats&include_clients=false"]


@pytest.mark.parametrize("query", STATS_QUERIES)
def test_stats_queries(pair, query):
    pair.connect("c1")
    pair.send("c1", identify(client_id="stats-consumer", hostname="h.example", user_agent="ua/1.0 <x>"))
    pair.send("c1", command("SUB h_stats a"))
    pair.connect("p")
    pair.send("p", command("PUB h_stats", b"x") + command("MPUB h_stats", mpub_body(b"y", b"z")))
    pair.http("POST", "/channel/create?topic=h_stats&channel=b")
    pair.http("GET", f"/stats{query}")


def test_stats_with_e2e_latency(pair):
    pair.connect("c1")
    pair.send("c1", identify(output_buffer_timeout=25))
    pair.send("c1", command("SUB h_e2e ch"))
    pair.send("c1", command("RDY 5"))
    pair.http("POST", "/mpub?topic=h_e2e", b"a\nb\nc")
    pair.send("c1", command("FIN <m0>") + command("FIN <m1>") + command("FIN <m2>"))
    pair.http("GET", "/stats?format=json&topic=h_e2e")


def test_stats_of_producers_filtered_by_topic(pair):
    pair.connect("p1")
    pair.send("p1", command("PUB h_prod1", b"x"))
    pair.connect("p2")
    pair.send("p2", command("PUB h_prod2", b"x"))
    for query in ("?format=json&topic=h_prod1", "?format=json&topic=h_prod2", "?topic=h_prod1",
                  "?format=json&topic=h_prod1&include_clients=false"):
        pair.http("GET", f"/stats{query}")


# -- /info, /config, /debug -----------------------------------------------------------------------

CONFIG_NAMES = sorted({flag.key for flag in NSQD_FLAGS} | {
    "nsqlookupd_tcp_addresses", "auth_http_addresses", "e2e_processing_latency_percentiles", "lookupd_tcp_address",
    "logger", "Logger", "LogLevel", "bogus", "tls_required", "version", "config", "verbose", "HTTPAddress",
    "queue_scan_interval", "queue_scan_dirty_percent"})
_BEYOND_NSQ_OPTIONS = {"msg_ttl", "max_attempts", "dead_letter_topic", "persist_deferred", "http_auth_required",
                       "max_queue_bytes", "queue_full", "channel_pace",
                       "auth_http_request_method", "io_backend", "enable_peek", "processing_time_percentiles",
                       "sigterm"}


@pytest.mark.parametrize("name", sorted(set(CONFIG_NAMES) - _BEYOND_NSQ_OPTIONS))
def test_get_config(pair, name):
    pair.http("GET", f"/config/{name}")


PUT_CONFIGS = [
    ("log_level", b"debug"), ("log_level", b"WARN"), ("log_level", b"warning"), ("log_level", b"info\n"),
    ("log_level", b""), ("log_level", b"fatal"), ("log_level", b"info"),
    ("nsqlookupd_tcp_addresses", b'["127.0.0.1:1"]'), ("nsqlookupd_tcp_addresses", b"[]"),
    ("nsqlookupd_tcp_addresses", b'"127.0.0.1:1"'), ("nsqlookupd_tcp_addresses", b"[1]"),
    ("nsqlookupd_tcp_addresses", b"not json"),
    ("nsqlookupd_tcp_addresses", b"null"), ("nsqlookupd_tcp_addresses", b"x" * 1025),
    ("mem_queue_size", b"5"), ("bogus", b"1"), ("log_level", b"x" * 1025),
]


@pytest.mark.parametrize("name,body", PUT_CONFIGS)
def test_put_config(pair, name, body):
    pair.http("PUT", f"/config/{name}", body)
    pair.http("GET", f"/config/{name}")


def test_put_config_lookupd_addresses_that_are_not_host_port(pair):
    """Deliberate difference (README): NSQ takes any strings and retries them forever; ours
    refuses what is not a host:port (as the flag does at the start)."""
    go, ours = pair.http_apart("PUT", "/config/nsqlookupd_tcp_addresses", b'["nope"]')
    assert go[0] == "status 200" and go[-1] == 'body [0] = "nope"'
    assert ours[0] == "status 400" and ours[-1] == 'body message = "INVALID_VALUE"'


def test_info_and_ping(pair):
    requests(pair, ("GET", "/info"), ("GET", "/ping"), ("HEAD", "/ping"), ("GET", "/info?format=json"),
             ("GET", "/ping", b"", {"Accept": "application/vnd.nsq; version=1.0"}),
             ("GET", "/info", b"", {"Accept": "application/vnd.nsq; version=1.0"}))


def test_free_memory(pair):
    """Deliberate difference (README): NSQ's handler frees the memory, then fails to write its
    empty answer (500); ours answers 200."""
    go, ours = pair.http_apart("POST", "/debug/freememory")
    assert go == ["status 500", "header content-type: application/json; charset=utf-8",
                  "header x-nsq-content-type: nsq; version=1.0", 'body message = "INTERNAL_ERROR"']
    assert ours == ["status 200", "header x-nsq-content-type: nsq; version=1.0", "body "]
