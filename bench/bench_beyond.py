"""What the opt-in features beyond NSQ cost nsqd: its CPU time per message (or request), off and on.

    python bench/bench_beyond.py [--runs=5] [--runfor=5s] [--features=http-auth]

http-auth: POST /pub over 4 keep-alive connections for --runfor, each request with a bearer
           secret, against nsqd without and with --http-auth-required (an auth server in this
           process grants everything; nsqd asks it once and keeps the answer).
Runs alternate off and on with a fresh nsqd each, so both see the same load on this shared
machine; prints the medians of nsqd's CPU microseconds per request and the rates.
"""

import argparse
import json
import re
import statistics
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsqd_process import cpu_seconds, free_port, start_nsqd  # noqa: E402
from bench.go_tools import start_tool  # noqa: E402

GRANT_EVERYTHING = json.dumps({"ttl": 3600, "identity": "bench", "authorizations": [
    {"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}]}).encode()


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


def http_pub(runfor: str, flags: list[str]) -> tuple[float, float]:
    """(requests/s, nsqd CPU microseconds per request)."""
    port = free_port()
    proc, _ = start_nsqd(f"--http-address=127.0.0.1:{port}", *flags)
    try:
        before = cpu_seconds(proc.pid)
        out = start_tool("bench_http_pub.py", f"--nsqd-http-address=127.0.0.1:{port}", f"--runfor={runfor}",
                     "--connections=4", "--bearer=bench").communicate()[0]
        used = cpu_seconds(proc.pid) - before
        per_second = float(re.search(r"([\d.]+)req/s", out).group(1))
        seconds = float(re.search(r"duration: ([\d.]+)s", out).group(1))
        return per_second, used / (per_second * seconds) * 1e6
    finally:
        proc.terminate()
        proc.wait()


def features(auth_address: str) -> dict:
    """name -> (measure(runfor, flags), flags off, flags on, unit)."""
    return {
        "http-auth": (http_pub, [f"--auth-http-address={auth_address}"],
                      [f"--auth-http-address={auth_address}", "--http-auth-required"], "req"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--features", default="http-auth")
    args = parser.parse_args()
    table = features(start_auth_server())
    for name in args.features.split(","):
        measure, off_flags, on_flags, unit = table[name]
        results = {"off": [], "on": []}
        for _ in range(args.runs):
            results["off"].append(measure(args.runfor, off_flags))
            results["on"].append(measure(args.runfor, on_flags))
        for state, runs in results.items():
            rates, costs = [r for r, _ in runs], [c for _, c in runs]
            print(f"{name} {state}: nsqd CPU {statistics.median(costs):.2f} us/{unit} "
                  f"({', '.join(f'{c:.2f}' for c in costs)}); {statistics.median(rates):,.0f} {unit}s/s", flush=True)


if __name__ == "__main__":
    main()
