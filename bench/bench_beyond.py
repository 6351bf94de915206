"""What the opt-in features beyond NSQ cost nsqd per message (or request), off and on.

    python bench/bench_beyond.py [--runs=5] [--runfor=5s] [--count=100000] [--features=http-auth,msg-ttl,...]
    python bench/bench_beyond.py --callgrind [--base-root=DIR] ...

http-auth: POST /pub over 4 keep-alive connections for --runfor (with --callgrind: --requests
           requests in turn on one), each request with a bearer secret, against nsqd without and
           with --http-auth-required (an auth server in this process grants everything; nsqd
           asks it once and keeps the answer).
msg-ttl:   --count 200-byte messages queued in a channel, then drained by bench_reader (RDY 2500,
           FIN each), without and with --msg-ttl=1h (every message checked, none expired).
dead-letter: the same drain without and with --max-attempts=100 (every message checked, none moved).
processing-time: the same drain without and with --processing-time-percentile=0.5,0.99 (every FIN timed).
write-through: the same drain with --mem-queue-size=0 (every message through the disk queue), without
           and with --persist-deferred (each delivery also recorded in the in-flight file).
queue-bound: --count messages published (MPUB of 200) into a channel and drained, all of it
           measured, without and with --max-queue-bytes=1GiB (every publish checked against the
           topic's and the channel's queue, every queue counting its bytes; none refused).
pace:      the drain of msg-ttl without and with --channel-pace=1000000000 (every delivery through
           the channel's token bucket, which never runs short).
pace-limiting: the same drain with --channel-pace=500 (the bucket short all along, even under
           valgrind: the timer wakes delivery 100 times a second, 5 messages each).
deferred:  --count DPUBs of 1 ms, pipelined on one connection, then drained as above, with
           --mem-queue-size=0, without and with --persist-deferred (each deferral and each release
           written to the channel's deferred file); the cost is per message, all of it included.
Runs alternate off and on with a fresh nsqd each, so both see the same load on this shared
machine; prints the medians of nsqd's CPU time per message and the rates. With --callgrind,
nsqd runs under valgrind and the figure is its instructions per message in the measured phase
(one run each: they barely vary); --base-root=DIR adds a row for the same work with the
feature's "off" flags on the nsqd of another checkout (the code before the feature).
"""

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_http_pub import request_bytes  # noqa: E402
from bench.go_tools import start_tool  # noqa: E402
from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import Started, cpu_seconds, start_nsqd  # noqa: E402
from bench.workers import read_http_response  # noqa: E402
from common.commands import Dpub, Mpub  # noqa: E402

GRANT_EVERYTHING = json.dumps({"ttl": 3600, "identity": "bench", "authorizations": [
    {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}]}).encode()
BATCH = 200
SIZE = 200


def start_auth_server() -> str:
    """An auth server granting everything to any secret; its address."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(GRANT_EVERYTHING)))
            self.end_headers()
            self.wfile.write(GRANT_EVERYTHING)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}"


class Meter:
    """Runs nsqd and measures what a phase of work costs it: CPU seconds, or instructions."""

    def __init__(self, callgrind: bool, root: Path = ROOT):
        self.callgrind = callgrind
        self.root = root
        self._out = Path(tempfile.mkdtemp(prefix="bench-beyond-")) / "callgrind.out"

    def start(self, flags: list[str]) -> Started:
        prefix = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={self._out}") if self.callgrind else ()
        return start_nsqd(*flags, prefix=prefix, root=self.root)

    def begin(self, proc: subprocess.Popen) -> float:
        if self.callgrind:
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
            return 0.0
        return cpu_seconds(proc.pid)

    def end(self, proc: subprocess.Popen, began: float) -> float:
        if not self.callgrind:
            return cpu_seconds(proc.pid) - began
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        newest = max(self._out.parent.glob(self._out.name + "*"), key=lambda path: path.stat().st_mtime)
        return float(re.search(r"^totals: (\d+)", newest.read_text(), re.M).group(1))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait()


def http_pub(meter: Meter, flags: list[str], args) -> tuple[float, float]:
    """(requests/s, nsqd's cost per request). Counting instructions, --requests requests one
    after another on one connection: a fixed amount of work, not what a slowed nsqd gets done
    in a time (which would count its timers' work over fewer requests)."""
    proc, _, http_address = meter.start(flags)
    port = int(http_address.rpartition(":")[2])
    try:
        if meter.callgrind:
            return _sequential_pubs(meter, proc, port, args.requests)
        began = meter.begin(proc)
        out = start_tool("bench_http_pub.py", f"--nsqd-http-address=127.0.0.1:{port}", f"--runfor={args.runfor}",
                         "--connections=4", "--bearer=bench").communicate()[0]
        cost = meter.end(proc, began)
        per_second = float(re.search(r"([\d.]+)req/s", out).group(1))
        seconds = float(re.search(r"duration: ([\d.]+)s", out).group(1))
        return per_second, cost / (per_second * seconds)
    finally:
        stop(proc)


def _sequential_pubs(meter: Meter, proc: subprocess.Popen, port: int, count: int) -> tuple[float, float]:
    request = request_bytes(f"127.0.0.1:{port}", "http_bench", SIZE, "bench")
    with socket.create_connection(("127.0.0.1", port)) as sock:  # start_nsqd saw it listen
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffered = bytearray()
        for _ in range(100):  # warm up: the auth server's answer, the topic
            sock.sendall(request)
            _, buffered = read_http_response(sock, buffered)
        began, started = meter.begin(proc), time.monotonic()
        for _ in range(count):
            sock.sendall(request)
            _, buffered = read_http_response(sock, buffered)
        return count / (time.monotonic() - started), meter.end(proc, began) / count


def consume(meter: Meter, flags: list[str], args) -> tuple[float, float]:
    """(messages/s, nsqd's cost per message) draining --count queued messages."""
    return _drain(meter, flags, args, _fill)


def publish_and_consume(meter: Meter, flags: list[str], args) -> tuple[float, float]:
    """(messages/s, nsqd's cost per message) publishing --count messages and draining them."""
    return _drain(meter, flags, args, _fill, measure_filling=True)


def deferred(meter: Meter, flags: list[str], args) -> tuple[float, float]:
    """(messages/s, nsqd's cost per message) of --count DPUBs of 1 ms, drained."""
    return _drain(meter, flags, args, _defer, measure_filling=True)


def _fill(producer: BenchConnection, count: int) -> None:
    batch = Mpub("sub_bench", [b"a" * SIZE] * BATCH).to_bytes()
    for _ in range(count // BATCH):
        producer.send(batch)
        producer.read_response()


def _defer(producer: BenchConnection, count: int) -> None:
    """BATCH DPUBs at a time, pipelined; each batch's answers counted before the next."""
    command = Dpub("sub_bench", 1, b"a" * SIZE).to_bytes()
    for _ in range(count // BATCH):
        producer.send(command * BATCH)
        answered = 0
        while answered < BATCH:
            answered += sum(frame.data == b"OK" for frame in producer.read_frames())


def _drain(meter: Meter, flags: list[str], args, fill, measure_filling: bool = False) -> tuple[float, float]:
    memory = [] if any(flag.startswith("--mem-queue-size") for flag in flags) else [
        f"--mem-queue-size={args.count + BATCH}"]
    proc, address, _ = meter.start([*memory, *flags])
    try:
        producer = BenchConnection(address)
        producer.send(b"SUB sub_bench ch\n")  # the channel exists before the messages
        producer.read_response()
        producer.close()
        began = meter.begin(proc) if measure_filling else 0.0
        producer = BenchConnection(address)
        producer.sock.settimeout(600)  # a stuck nsqd fails the run instead of hanging it
        fill(producer, args.count)
        producer.close()
        if not measure_filling:
            began = meter.begin(proc)
        out = start_tool("bench_reader.py", f"--nsqd-tcp-address={address}", "--runfor=600s",
                         f"--count={args.count}").communicate()[0]
        cost = meter.end(proc, began)
        return float(re.search(r"([\d.]+)ops/s", out).group(1)), cost / args.count
    finally:
        stop(proc)


def features(auth_address: str) -> dict:
    """name -> (workload, flags off, flags on, unit)."""
    auth = f"--auth-http-address={auth_address}"
    return {
        "http-auth": (http_pub, [auth], [auth, "--http-auth-required"], "req"),
        "msg-ttl": (consume, [], ["--msg-ttl=1h"], "msg"),
        "dead-letter": (consume, [], ["--max-attempts=100"], "msg"),
        "processing-time": (consume, [], ["--processing-time-percentile=0.5,0.99"], "msg"),
        "queue-bound": (publish_and_consume, [], [f"--max-queue-bytes={1 << 30}"], "msg"),
        "pace": (consume, [], ["--channel-pace=1000000000"], "msg"),
        "pace-limiting": (consume, [], ["--channel-pace=500"], "msg"),
        "write-through": (consume, ["--mem-queue-size=0"], ["--mem-queue-size=0", "--persist-deferred"], "msg"),
        "deferred": (deferred, ["--mem-queue-size=0"], ["--mem-queue-size=0", "--persist-deferred"], "msg"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=3000, help="http-auth with --callgrind: requests counted")
    parser.add_argument("--features", default="http-auth,msg-ttl,dead-letter,write-through,deferred")
    parser.add_argument("--callgrind", action="store_true", help="count nsqd's instructions (valgrind), one run each")
    parser.add_argument("--base-root", type=Path, help="also run the 'off' flags on this checkout's nsqd")
    args = parser.parse_args()
    table = features(start_auth_server())
    meter = Meter(args.callgrind)
    runs = 1 if args.callgrind else args.runs
    for name in args.features.split(","):
        workload, off_flags, on_flags, unit = table[name]
        states = {"off": (meter, off_flags), "on": (meter, on_flags)}
        if args.base_root:
            states = {"base": (Meter(args.callgrind, args.base_root.resolve()), off_flags), **states}
        results: dict[str, list[tuple[float, float]]] = {state: [] for state in states}
        for _ in range(runs):
            for state, (state_meter, flags) in states.items():
                results[state].append(workload(state_meter, flags, args))
        for state, measured in results.items():
            rates, costs = [r for r, _ in measured], [c for _, c in measured]
            if args.callgrind:
                figure = f"{statistics.median(costs):,.0f} instructions/{unit}"
            else:
                figure = (f"CPU {statistics.median(costs) * 1e6:.2f} us/{unit} "
                          f"({', '.join(f'{c * 1e6:.2f}' for c in costs)})")
            print(f"{name} {state}: nsqd {figure}; {statistics.median(rates):,.0f} {unit}s/s", flush=True)


if __name__ == "__main__":
    main()
