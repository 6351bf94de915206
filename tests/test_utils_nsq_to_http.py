"""nsq_to_http end to end: the console script consuming from a real nsqd and calling real
HTTP servers (threaded http.server endpoints that record what they receive)."""

import re
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .helpers import NsqdProcess
from .utils_helpers import (GO_LOG_STAMP, Utility, assert_all_fatal, assert_go_usage, channel_stats, publish,
                            run_script, run_scripts, wait_until)

USAGE = """\
  -channel string
    \tnsq channel (default "nsq_to_http")
  -consumer-opt value
    \toption to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)
  -content-type string
    \tthe Content-Type used for POST requests (default "application/octet-stream")
  -get value
    \tHTTP address to make a GET request to. '%s' will be printf replaced with data (may be given multiple times)
  -header value
    \tCustom header for HTTP requests (may be given multiple times)
  -http-client-connect-timeout duration
    \ttimeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    \ttimeout for HTTP request (default 20s)
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -max-in-flight int
    \tmax number of messages to allow in flight (default 200)
  -mode string
    \tthe upstream request mode options: round-robin, hostpool (default), epsilon-greedy (default "hostpool")
  -n int
    \tnumber of concurrent publishers (default 100)
  -nsqd-tcp-address value
    \tnsqd TCP address (may be given multiple times)
  -post value
    \tHTTP address to make a POST request to.  data will be in the body (may be given multiple times)
  -sample float
    \t% of messages to publish (float b/w 0 -> 1) (default 1)
  -status-every int
    \tthe # of requests between logging status (per handler), 0 disables (default 250)
  -topic string
    \tnsq topic
  -version
    \tprint version string
"""
FAST_RETRY = ["--consumer-opt=default_requeue_delay,0", "--consumer-opt=max_backoff_duration,50ms"]


class Endpoint:
    """A real HTTP server on a loopback port; answers 500 while ``failures`` lasts, then 200."""

    def __init__(self, failures: int = 0):
        self.requests: list[dict] = []
        self.failures = failures
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def do_GET(self):
                self.answer(b"")

            def answer(self, body: bytes) -> None:
                endpoint.requests.append({"method": self.command, "path": self.path, "body": body,
                                          "headers": dict(self.headers)})
                status = 500 if endpoint.failures > 0 else 200
                endpoint.failures -= 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints():
    made: list[Endpoint] = []

    def make(failures: int = 0) -> Endpoint:
        made.append(Endpoint(failures))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    proc = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}")
    yield proc
    proc.stop()


def test_help_version_and_bad_flags():
    runs = run_scripts("nsq_to_http", ["--h"], ["--version"], ["--sample=most"])
    assert_go_usage(runs[0], "nsq_to_http", USAGE)
    version = runs[1]
    assert (version.returncode, version.stdout) == (0, "nsq_to_http v1.3.0\n")
    bad = runs[2]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "most" for flag -sample: parse error\nUsage of nsq_to_http:\n')


def test_fatal_checks():
    nsqd = "--nsqd-tcp-address=127.0.0.1:1"
    assert_all_fatal("nsq_to_http", [
        ([nsqd], "--topic and --channel are required"),
        (["--topic=t", "--content-type=text/plain", "--get=http://x/%s"], "--content-type only used with --post"),
        (["--topic=t", nsqd], "--get or --post required"),
        (["--topic=t", nsqd, "--get=http://x/%s", "--post=http://x"], "use --get or --post not both"),
        (["--topic=t", nsqd, "--get=http://x/"], "invalid GET address - must be a printf string"),
        (["--topic=t", nsqd, "--post=http://x", "--header=X-Empty:"], "--header value format should be 'key=value'"),
        (["--topic=t", nsqd, "--post=http://x", "--sample=1.5"], "ERROR: --sample must be between 0.0 and 1.0"),
    ])


def test_post_round_robin_with_headers_and_timings(nsqd, endpoints):
    first, second = endpoints(), endpoints()
    utility = Utility("nsq_to_http", "-topic", "to_http", "-nsqd-tcp-address", nsqd.tcp_address,
                      "-post", first.url + "/in", "-post", second.url + "/in", "-mode", "round-robin",
                      "-content-type", "text/plain", "-header", "X-Trace: abc", "-status-every", "2", "-n", "1")
    try:
        publish(nsqd.http_port, "to_http", b"m1", b"m2", b"m3", b"m4")
        wait_until(lambda: len(first.requests) + len(second.requests) == 4, what="4 requests")
        utility.wait_for_stderr("[aggregate]: finished 2")
        assert utility.stop(signal.SIGINT) == 0
    finally:
        utility.kill()
    assert [r["body"] for r in second.requests] == [b"m1", b"m3"]  # Go's counter starts at 1
    assert [r["body"] for r in first.requests] == [b"m2", b"m4"]
    for request in first.requests + second.requests:
        assert (request["method"], request["path"]) == ("POST", "/in")
        assert request["headers"]["Content-Type"] == "text/plain"
        assert request["headers"]["User-Agent"] == "nsq_to_http v1.3.0"
        assert request["headers"]["X-Trace"] == "abc"
    log = "".join(utility.stderr)
    assert "Warning: use more than 100 status values for accurate percentiles (configured with 2)" in log
    assert re.search(GO_LOG_STAMP + r" \[aggregate\]: finished 2 - 99th: \d+\.\d\dms - 95th: \d+\.\d\dms - "
                     r"avg: \d+\.\d\dms\n", log), log
    stats = channel_stats(nsqd.http_port, "to_http", "nsq_to_http")
    assert (stats["depth"], stats["in_flight_count"], stats["message_count"]) == (0, 0, 4)


def test_get_escapes_the_body_and_failures_are_retried(nsqd, endpoints):
    flaky = endpoints(failures=1)
    utility = Utility("nsq_to_http", "--topic=to_get", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--get={flaky.url}/in?data=%s&x=1", *FAST_RETRY)
    try:
        publish(nsqd.http_port, "to_get", "a b&c/é".encode())
        wait_until(lambda: len(flaky.requests) == 2, what="a failed request and its retry")
        wait_until(lambda: channel_stats(nsqd.http_port, "to_get", "nsq_to_http")["in_flight_count"] == 0,
                   what="the message finished")
        assert utility.stop() == 0
    finally:
        utility.kill()
    assert [r["path"] for r in flaky.requests] == ["/in?data=a+b%26c%2F%C3%A9&x=1"] * 2
    assert "got status code 500" in "".join(utility.stderr)
    stats = channel_stats(nsqd.http_port, "to_get", "nsq_to_http")
    assert (stats["depth"], stats["requeue_count"]) == (0, 1)


def test_hostpool_passes_over_an_address_that_failed(nsqd, endpoints):
    good = endpoints()
    dead = endpoints()
    dead.close()
    utility = Utility("nsq_to_http", "--topic=to_pool", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--post={dead.url}", f"--post={good.url}", "--n=1", *FAST_RETRY)
    try:
        publish(nsqd.http_port, "to_pool", *[b"p%d" % i for i in range(5)])
        wait_until(lambda: len(good.requests) == 5, what="every message at the live address")
        assert utility.stop() == 0
    finally:
        utility.kill()
    assert sorted(r["body"] for r in good.requests) == [b"p%d" % i for i in range(5)]
    assert channel_stats(nsqd.http_port, "to_pool", "nsq_to_http")["requeue_count"] == 1
