"""NSQ's utilities and ours, each against NSQ v1.3.0's Go daemons and against ours, with the same flags.

Every case runs four ways: NSQ's utility against Go's nsqd and nsqlookupd (the reference), NSQ's
against ours, ours against Go's, ours against ours; what each prints, writes, publishes or sends
must be the reference's byte for byte where NSQ's is deterministic (in what order two topics
interleave is not; Go's log lines carry times, and the client library's differ in wording, README
"Deliberate differences"). The existing tests/test_utils_*.py test ours against our nsqd alone.
"""

import gzip
import json
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import nsqclient

from .admin_helpers import Consumer
from .go_nsq import GoLookupdProcess, GoNsqdProcess, go_program, requires_go
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import GO_LOG_STAMP, Utility, channel_stats, http, script, topic_stats, wait_until

pytestmark = requires_go

COMBOS = [("go", "go"), ("go", "ours"), ("ours", "go"), ("ours", "ours")]  # (utility, daemons); the first is NSQ
REFERENCE = COMBOS[0]


class Daemons:
    """nsqlookupd and an nsqd registered with it, of one implementation."""

    def __init__(self, kind: str, data_dir: Path):
        lookupd_class, nsqd_class = {"go": (GoLookupdProcess, GoNsqdProcess),
                                     "ours": (LookupdProcess, NsqdProcess)}[kind]
        self.lookupd = lookupd_class("--broadcast-address=127.0.0.1")
        path = data_dir / f"nsqd-{kind}"
        path.mkdir()
        self.nsqd = nsqd_class(f"--data-path={path}", "--broadcast-address=127.0.0.1",
                               f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}")
        self.lookupd_http = f"127.0.0.1:{self.lookupd.http_port}"
        self.nsqd_http = f"127.0.0.1:{self.nsqd.http_port}"

    def stop(self) -> list[int]:
        return [self.nsqd.stop(), self.lookupd.stop()]


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("utils")
    running = {kind: Daemons(kind, data_dir) for kind in ("go", "ours")}
    yield running
    codes = [code for each in running.values() for code in each.stop()]
    assert codes == [0] * len(codes)


def program(utility: str, name: str) -> str:
    return go_program(name) if utility == "go" else script(name)


def run(utility: str, name: str, *args: str, input: bytes | None = None, timeout: float = 30):
    """One utility run to its end: (exit status, stdout bytes, stderr text)."""
    done = subprocess.run([program(utility, name), *args], input=input, capture_output=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr.decode()


def start(utility: str, name: str, *args: str) -> Utility:
    """A long-running utility; stop it with :func:`stop`."""
    return Utility(name, *args, program=program(utility, name))


def stop(running: Utility) -> tuple[int, bytes, str]:
    """SIGTERM, then (exit status, stdout, stderr) once it has exited."""
    return running.stop(), b"".join(running.stdout), "".join(running.stderr)


def publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    """``bodies`` as one MPUB over TCP (bodies may hold newlines)."""
    nsqclient.publish(nsqd.tcp_address, topic, bodies)


def prepare(nsqd, topic: str, channels: list[str], bodies: list[bytes]) -> None:
    """``topic`` with ``channels``, each holding ``bodies``."""
    http(nsqd.http_port, f"/topic/create?topic={topic}", method="POST")
    for channel in channels:
        http(nsqd.http_port, f"/channel/create?topic={topic}&channel={channel}", method="POST")
    publish(nsqd, topic, bodies)


def arrived(nsqd, topic: str) -> list[bytes]:
    """Every message published to ``topic`` so far, in order (a channel of its own takes them)."""
    count = (topic_stats(nsqd.http_port, topic) or {}).get("message_count", 0)
    if not count:
        return []
    consumer = Consumer(nsqd.tcp_port, topic, "arrived", rdy=count + 1)
    try:
        wait_until(lambda: len(consumer.bodies) >= count, what=f"{count} messages of {topic}")
    finally:
        consumer.close()
    return consumer.bodies


def each_way(run_one) -> dict:
    """``run_one(utility, daemons)`` for every combination, all at once (each on topics and channels of
    its own), by combination."""
    with ThreadPoolExecutor(len(COMBOS)) as pool:
        futures = {combo: pool.submit(run_one, *combo) for combo in COMBOS}
    return {combo: future.result() for combo, future in futures.items()}


def assert_as_nsq(results: dict):
    """Every combination's result is the reference's; that result."""
    assert all(result == results[REFERENCE] for result in results.values()), results
    return results[REFERENCE]


def unstamped(log: str) -> list[str]:
    """Go log lines without their date and time."""
    return [re.sub(f"^{GO_LOG_STAMP} ", "", line) for line in log.splitlines()]


# -- to_nsq ----------------------------------------------------------------------------------------

TO_NSQ = [
    (b"first\nsecond\n\nthird line\n", []),
    (b"a\r\nb\n\n\nc\n\xff\xfe\n\x00\n", []),
    (b"a,b,,c,", ["--delimiter=,"]),
    (b"", []),
    (b"\n\n", []),
    (b"one\ntwo\n", ["--producer-opt=output_buffer_timeout,50ms", "--rate=1000"]),
]


@pytest.mark.parametrize("case", range(len(TO_NSQ)))
def test_to_nsq_publishes_what_nsqs_does(daemons, case):
    data, args = TO_NSQ[case]

    def one(utility: str, kind: str):
        nsqd, topic = daemons[kind].nsqd, f"to_nsq_{case}_{utility}"
        status, stdout, _ = run(utility, "to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                                *args, input=data)
        return status, stdout, arrived(nsqd, topic)

    assert assert_as_nsq(each_way(one))[0] == 0


def test_to_nsq_publishes_a_last_piece_without_delimiter_whole(daemons):
    """README, Deliberate differences, ### Utilities: NSQ's to_nsq drops the last byte of a last piece
    that no delimiter ends; ours publishes it whole."""
    def one(utility: str, kind: str):
        nsqd, topic = daemons[kind].nsqd, f"to_nsq_unended_{utility}"
        status = run(utility, "to_nsq", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                     "--delimiter=\t", input=b"a\tbc\tlast")[0]
        return status, arrived(nsqd, topic)

    for (utility, _), result in each_way(one).items():
        assert result == (0, [b"a", b"bc", b"las" if utility == "go" else b"last"])


# -- nsq_tail --------------------------------------------------------------------------------------

TAIL_BODIES = [b"plain", b"two\nlines", b"\xff\xfe binary \x00", b"{\"json\": true}", b" spaced ", b"last"]


TAIL_ARGS = {"plain": [], "print_topic": ["--print-topic"], "max_in_flight": ["--print-topic", "--max-in-flight=1"],
             "n_3": ["-n=3", "--print-topic"]}


@pytest.mark.parametrize("case", TAIL_ARGS)
@pytest.mark.parametrize("source", ["nsqd", "lookupd"])
def test_nsq_tail_prints_what_nsqs_does(daemons, case, source):
    args = TAIL_ARGS[case]
    topic = f"tail_{case}_{source}"
    for kind in ("go", "ours"):
        prepare(daemons[kind].nsqd, topic, ["tail_go", "tail_ours"], TAIL_BODIES)

    def one(utility: str, kind: str):
        address = (f"--nsqd-tcp-address={daemons[kind].nsqd.tcp_address}" if source == "nsqd"
                   else f"--lookupd-http-address={daemons[kind].lookupd_http}")
        count = [] if any(arg.startswith("-n=") for arg in args) else [f"-n={len(TAIL_BODIES)}"]
        return run(utility, "nsq_tail", f"--topic={topic}", f"--channel=tail_{utility}", address, *count, *args)[:2]

    expected = TAIL_BODIES[:3] if "-n=3" in args else TAIL_BODIES
    prefix = f"{topic} | ".encode() if "--print-topic" in args else b""
    assert assert_as_nsq(each_way(one)) == (0, b"".join(prefix + body + b"\n" for body in expected))


def test_nsq_tail_prints_every_topic_as_nsqs_does(daemons):
    """Two topics: how their lines interleave is not deterministic, the lines are; stopped by SIGTERM."""
    topics = ("tail_a", "tail_b")
    for kind in ("go", "ours"):
        for topic in topics:
            prepare(daemons[kind].nsqd, topic, ["tail_go", "tail_ours"], [topic.encode() + b"-%d" % i for i in range(5)])

    def one(utility: str, kind: str):
        tail = start(utility, "nsq_tail", *[f"--topic={topic}" for topic in topics], f"--channel=tail_{utility}",
                     f"--lookupd-http-address={daemons[kind].lookupd_http}", "--print-topic")
        try:
            wait_until(lambda: all(finished(daemons[kind], topic, f"tail_{utility}") for topic in topics),
                       what="both topics read")
        finally:
            status, stdout, _ = stop(tail)
        return status, sorted(stdout.splitlines())

    status, lines = assert_as_nsq(each_way(one))
    assert (status, len(lines), lines[0]) == (0, 10, b"tail_a | tail_a-0")


# -- nsq_stat --------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["nsqd", "lookupd"])
def test_nsq_stat_prints_nsqs_lines(daemons, source):
    """A channel nothing changes: every poll prints the same numbers, and both print NSQ's table."""
    topic = f"stat_{source}"
    for kind in ("go", "ours"):
        prepare(daemons[kind].nsqd, topic, ["c"], [b"m"] * 7)
        http(daemons[kind].nsqd.http_port, f"/channel/pause?topic={topic}&channel=c", method="POST")

    def one(utility: str, kind: str):
        address = (f"--nsqd-http-address={daemons[kind].nsqd_http}" if source == "nsqd"
                   else f"--lookupd-http-address={daemons[kind].lookupd_http}")
        return run(utility, "nsq_stat", f"--topic={topic}", "--channel=c", address, "--interval=50ms", "--count=3")[:2]

    status, stdout = assert_as_nsq(each_way(one))
    assert status == 0 and len(stdout.splitlines()) == 5


@pytest.mark.parametrize("args", [["--topic=stat_nsqd", "--channel=nope"], ["--topic=nope", "--channel=c"]])
def test_nsq_stat_fails_as_nsqs_does(daemons, args):
    def one(utility: str, kind: str):
        status, stdout, stderr = run(utility, "nsq_stat", *args, f"--nsqd-http-address={daemons[kind].nsqd_http}",
                                     "--interval=50ms", "--count=2")
        return status, stdout, unstamped(stderr)[-1:]

    assert assert_as_nsq(each_way(one))[0] == 1


# -- nsq_to_file -----------------------------------------------------------------------------------

FILE_BODIES = [b"first", b"second line", b"\xff binary \x00", b"x" * 30, b"fifth", b"sixth and last"]
TO_FILE = {
    "default": ["--host-identifier=archive"],
    "host": ["--host-identifier=<SHORT_HOST>-x"],
    "gzip": ["--gzip", "--host-identifier=h", "--gzip-level=9"],
    "rotate_size": ["--rotate-size=40", "--skip-empty-files", "--filename-format=<TOPIC>.<HOST><REV>.log",
                    "--host-identifier=h"],
    "work_dir": ["--work-dir={work}", "--filename-format=<TOPIC>/<DATETIME>/<HOST><REV>.log", "--host-identifier=h"],
}


def archived(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (gzip files decompressed: compressors differ) by its path."""
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            files[str(path.relative_to(directory))] = gzip.decompress(data) if path.suffix == ".gz" else data
    return files


@pytest.mark.parametrize("case", TO_FILE)
def test_nsq_to_file_writes_the_files_nsqs_writes(daemons, tmp_path, case):
    topic = f"file_{case}"
    for kind in ("go", "ours"):
        prepare(daemons[kind].nsqd, topic, ["file_go", "file_ours"], FILE_BODIES)

    def one(utility: str, kind: str):
        output, work = tmp_path / f"{utility}-{kind}", tmp_path / f"{utility}-{kind}-work"
        args = [arg.replace("{work}", str(work)) for arg in TO_FILE[case]]
        archiver = start(utility, "nsq_to_file", f"--topic={topic}", f"--channel=file_{utility}",
                         f"--nsqd-tcp-address={daemons[kind].nsqd.tcp_address}", f"--output-dir={output}",
                         "--datetime-format=%Y", "--sync-interval=100ms", *args)
        try:
            wait_until(lambda: finished(daemons[kind], topic, f"file_{utility}"), what="every message written")
        finally:
            status = stop(archiver)[0]
        return status, archived(output), archived(work) if work.exists() else None

    status, files, _ = assert_as_nsq(each_way(one))
    assert status == 0 and b"".join(files.values()) == b"".join(body + b"\n" for body in FILE_BODIES)


def finished(daemons: Daemons, topic: str, channel: str) -> bool:
    """Whether every message ``topic`` holds went through ``channel`` and was finished."""
    stats = channel_stats(daemons.nsqd.http_port, topic, channel) or {}
    return stats.get("message_count") == topic_stats(daemons.nsqd.http_port, topic)["message_count"] and \
        stats.get("depth") == 0 and stats.get("in_flight_count") == 0


# -- nsq_to_http -----------------------------------------------------------------------------------

HTTP_BODIES = [b"first", b"a b&c=d/e?f", b"\xff\x00 binary", b"{\"json\": [1, 2]}", b"last"]
TO_HTTP = {
    "post": ["--post={url}/post?from=nsq"],
    "post_one_at_a_time": ["--post={url}/post", "-n=1", "--content-type=text/plain", "--header=X-One: 1",
                           "--header=X-Two:two words"],
    "get": ["--get={url}/get?data=%s&x=1", "--header=x-lower: v", "--header=User-Agent: mine"],
    "round_robin": ["--post={url}/a", "--post={url}/b?c", "--mode=round-robin", "-n=1"],
}


@pytest.fixture
def endpoint():
    from .test_utils_nsq_to_http import Endpoint
    running = Endpoint()
    yield running
    running.close()


@pytest.mark.parametrize("case", TO_HTTP)
def test_nsq_to_http_sends_the_requests_nsqs_sends(daemons, endpoint, case):
    topic = f"http_{case}"
    for kind in ("go", "ours"):
        prepare(daemons[kind].nsqd, topic, ["http_go", "http_ours"], HTTP_BODIES)

    def one(utility: str, kind: str):
        prefix = f"/{utility}-{kind}"
        args = [arg.replace("{url}", endpoint.url + prefix) for arg in TO_HTTP[case]]
        sender = start(utility, "nsq_to_http", f"--topic={topic}", f"--channel=http_{utility}",
                       f"--nsqd-tcp-address={daemons[kind].nsqd.tcp_address}", *args)
        try:
            wait_until(lambda: finished(daemons[kind], topic, f"http_{utility}"), what="every message sent")
        finally:
            status, stdout, _ = stop(sender)
        requests = [(r["method"], r["path"].removeprefix(prefix), r["body"], r["headers"])
                    for r in list(endpoint.requests) if r["path"].startswith(prefix + "/")]
        return status, stdout, requests if "-n=1" in args else sorted(requests, key=repr)

    status, _, requests = assert_as_nsq(each_way(one))
    assert status == 0 and len(requests) == len(HTTP_BODIES)


# -- refusals --------------------------------------------------------------------------------------

FATALS = [
    ("to_nsq", []), ("to_nsq", ["--topic=t"]), ("to_nsq", ["--topic=t", "--delimiter=ab", "{nsqd}"]),
    ("nsq_tail", []), ("nsq_tail", ["{nsqd}"]), ("nsq_tail", ["--topic=t", "{nsqd}", "{lookupd}"]),
    ("nsq_tail", ["--topic=t", "--channel=bad channel", "{nsqd}"]),
    ("nsq_stat", ["--topic=t"]), ("nsq_stat", ["--topic=t", "--channel=c"]),
    ("nsq_stat", ["--topic=t", "--channel=c", "--interval=0s", "{nsqd_http}"]),
    ("nsq_stat", ["--topic=t", "--channel=c", "--nsqd-http-address=http://127.0.0.1:1"]),
    ("nsq_to_file", ["{nsqd}"]), ("nsq_to_file", ["--topic=t"]), ("nsq_to_file", ["--topic-pattern=x"]),
    ("nsq_to_file", ["--topic=t", "{nsqd}", "--gzip", "--gzip-level=10"]),
    ("nsq_to_file", ["--topic=t", "{nsqd}", "--gzip", "--rotate-size=1G"]),
    ("nsq_to_http", ["{nsqd}"]), ("nsq_to_http", ["--topic=t", "{nsqd}"]),
    ("nsq_to_http", ["--topic=t", "{nsqd}", "--get=http://x/%s", "--post=http://y"]),
    ("nsq_to_http", ["--topic=t", "{nsqd}", "--get=http://x/"]),
    ("nsq_to_http", ["--topic=t", "{nsqd}", "--post=http://x/", "--header=nope"]),
    ("nsq_to_http", ["--topic=t", "{nsqd}", "--get=http://x/%s", "--content-type=text/plain"]),
    ("nsq_to_http", ["--topic=t", "{nsqd}", "--post=http://x/", "--sample=2"]),
    ("nsq_to_nsq", ["{nsqd}"]), ("nsq_to_nsq", ["--topic=t", "{nsqd}"]),
    ("nsq_to_nsq", ["--topic=t", "{nsqd}", "--destination-nsqd-tcp-address=127.0.0.1:1", "--destination-topic=a b"]),
    ("nsq_tail", ["--topic=bad topic", "{nsqd}"]), ("nsq_tail", ["--topic=t", "--channel=a/b", "{nsqd}"]),
    ("nsq_to_http", ["--topic=t", "--channel=#ephemeral", "{nsqd}", "--post=http://x/"]),
    ("nsq_to_nsq", ["--topic=t", "--channel=c!", "{nsqd}", "{destination}"]),
]


@pytest.mark.parametrize("name, args", FATALS)
def test_refusals_are_nsqs(daemons, name, args):
    def one(utility: str, kind: str):
        addresses = {"{nsqd}": f"--nsqd-tcp-address={daemons[kind].nsqd.tcp_address}",
                     "{lookupd}": f"--lookupd-http-address={daemons[kind].lookupd_http}",
                     "{nsqd_http}": f"--nsqd-http-address={daemons[kind].nsqd_http}",
                     "{destination}": f"--destination-nsqd-tcp-address={daemons[kind].nsqd.tcp_address}"}
        status, stdout, stderr = run(utility, name, *[addresses.get(arg, arg) for arg in args], input=b"x\n")
        return status, stdout, [line.replace(str(daemons[kind].nsqd.tcp_port), "<port>")
                                for line in unstamped(stderr)[-1:]]

    assert assert_as_nsq(each_way(one))[0] != 0


@pytest.mark.parametrize("name, args, nsqs, ours", [
    ("nsq_to_file", ["--topic=t", "--gzip", "--filename-format=<TOPIC>.log"],
     "ERROR: couldn't create logger for new topic t: missing <REV> in --filename-format when gzip, rotation, or "
     "work dir enabled", "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"),
    ("nsq_to_file", ["--topic=t", "--channel=a/b"], "ERROR: couldn't create logger for new topic t: invalid channel name",
     "invalid channel name"),
    ("nsq_to_http", ["--topic=t", "--post=http://127.0.0.1:1/", "--mode=fastest"], "connecting to nsqd",
     "invalid --mode 'fastest' (one of round-robin, hostpool, epsilon-greedy)"),
    ("nsq_to_nsq", ["--topic=t", "--destination-nsqd-tcp-address=127.0.0.1:1", "--mode=fastest"],
     "connecting to nsqd", "invalid --mode 'fastest' (one of round-robin, hostpool, epsilon-greedy)"),
])
def test_where_ours_refuses_on_purpose(daemons, tmp_path, name, args, nsqs, ours):
    """README, Deliberate differences, ### Utilities: where NSQ's logs a setting it cannot use (or
    silently uses another) and runs on doing nothing, ours says why and exits 1."""
    address = f"--nsqd-tcp-address={daemons['go'].nsqd.tcp_address}"
    output = [f"--output-dir={tmp_path}"] if name == "nsq_to_file" else []
    running = start("go", name, *args, address, *output)
    try:
        running.wait_for_stderr(nsqs)
    finally:
        assert stop(running)[0] == 0
    status, _, stderr = run("ours", name, *args, address, *output)
    assert (status, unstamped(stderr)[-1]) == (1, ours)


def test_to_nsq_refuses_a_topic_name_nsqd_would_read_as_another(daemons):
    """README, Deliberate differences, ### Utilities: NSQ's to_nsq sends ``PUB bad topic!``, which
    nsqd reads as a PUB to ``bad``; ours refuses the name before sending anything."""
    for kind in ("go", "ours"):
        nsqd = daemons[kind].nsqd
        assert run("go", "to_nsq", "--topic=bad topic!", f"--nsqd-tcp-address={nsqd.tcp_address}",
                   input=b"x\n")[0] == 0
        assert arrived(nsqd, "bad") == [b"x"]
        status, _, stderr = run("ours", "to_nsq", "--topic=bad topic!", f"--nsqd-tcp-address={nsqd.tcp_address}",
                                input=b"y\n")
        assert (status, unstamped(stderr)[-1]) == (1, 'E_BAD_TOPIC PUB topic name "bad topic!" is not valid')
        assert topic_stats(nsqd.http_port, "bad")["message_count"] == 1


# -- nsq_to_nsq ------------------------------------------------------------------------------------

RELAY_BODIES = [
    b'{"kind": "keep", "a": 1, "b": "two", "c": [1, 2.5]}',
    b'{"kind": "drop", "a": 2}',
    b"not json at all",
    b'{"kind": "keep", "b": {"z": 1, "y": [true, null, "<&>"]}, "a": 1.5, "zz": 3}',
    b'{"kind": "keep", "a": 1e20, "b": [1e-5, 1e-7, 1e21, 0.1, -0.0, 123456789.25, 1e16]}',
    b'{"kind": "keep", "a": 7, "b": "\\u00e9\\u2028 \\ud83d\\ude00 \\"q\\" \\\\ /", "a": 8}',
    b'{"kind": 1, "a": 3}',
    b'[1, 2]',
    b'{"kind": "keep"}',
    b'{"kind": "keep", "a": "\xff bad utf-8", "b": {"k": 1, "k": 2, "K": 3}}',
    b'{"kind": "keep", "a": 1e400}',
    b'{"kind": "keep", "a": NaN}',
    b'{"kind": "keep", "a": 1} trailing',
    b"plain last",
]
TO_NSQ_ARGS = {
    "relay": [],
    "require_field": ["--require-json-field=kind"],
    "require_value": ["--require-json-field=kind", "--require-json-value=keep"],
    "whitelist": ["--whitelist-json-field=a", "--whitelist-json-field=b"],
    "whitelist_required": ["--require-json-field=kind", "--require-json-value=keep", "--whitelist-json-field=b",
                           "--whitelist-json-field=a", "--whitelist-json-field=missing"],
}


@pytest.mark.parametrize("case", TO_NSQ_ARGS)
def test_nsq_to_nsq_relays_what_nsqs_relays(daemons, case):
    topic = f"relay_{case}"
    bodies = RELAY_BODIES if case != "require_value" else [body for body in RELAY_BODIES if body != b'{"kind": 1, "a": 3}']
    for kind in ("go", "ours"):
        prepare(daemons[kind].nsqd, topic, ["relay_go", "relay_ours"], bodies)

    def one(utility: str, kind: str):
        nsqd, destination = daemons[kind].nsqd, f"{topic}_to_{utility}"
        relay = start(utility, "nsq_to_nsq", f"--topic={topic}", f"--channel=relay_{utility}",
                      f"--nsqd-tcp-address={nsqd.tcp_address}", f"--destination-nsqd-tcp-address={nsqd.tcp_address}",
                      f"--destination-topic={destination}", "--consumer-opt=max_backoff_duration,0", *TO_NSQ_ARGS[case])
        try:
            wait_until(lambda: finished(daemons[kind], topic, f"relay_{utility}"), what="every message relayed")
        finally:
            status = stop(relay)[0]
        return status, arrived(nsqd, destination)

    status, relayed = assert_as_nsq(each_way(one))
    assert status == 0 and relayed


def test_nsq_to_file_archives_the_topics_its_pattern_finds_as_nsqs_does(daemons, tmp_path):
    topics = ["found_a", "found_b"]
    for kind in ("go", "ours"):
        for topic in [*topics, "unfound"]:
            prepare(daemons[kind].nsqd, topic, ["file_go", "file_ours"], [topic.encode(), b"second"])
        wait_until(lambda: all(lookupd_lists(daemons[kind], topic) for topic in topics), what="topics registered")

    def one(utility: str, kind: str):
        output = tmp_path / f"{utility}-{kind}"
        archiver = start(utility, "nsq_to_file", "--topic-pattern=^found_", "--topic-refresh=100ms",
                         f"--channel=file_{utility}", f"--lookupd-http-address={daemons[kind].lookupd_http}",
                         f"--output-dir={output}", "--datetime-format=%Y", "--host-identifier=h",
                         "--sync-interval=100ms")
        try:
            wait_until(lambda: all(finished(daemons[kind], topic, f"file_{utility}") for topic in topics),
                       what="both topics archived")
        finally:
            status = stop(archiver)[0]
        return status, archived(output)

    assert assert_as_nsq(each_way(one)) == (0, {f"{topic}.h.{time.localtime().tm_year}.log": topic.encode() + b"\nsecond\n"
                                      for topic in topics})


def lookupd_lists(daemons: Daemons, topic: str) -> bool:
    return topic in json.loads(http(daemons.lookupd.http_port, "/topics"))["topics"]
