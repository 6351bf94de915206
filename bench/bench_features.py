"""Publish and consume throughput over TLS, snappy and deflate, beside plain; medians of --runs.

    python bench/bench_features.py [--runs=3] [--runfor=5s] [--count=200000]

publish: bench_writer with 2 connections, MPUB batches of 200 x 200-byte messages, for --runfor.
consume: --count messages are published first (plain), then bench_reader (SUB, RDY 2500, FIN
         each) drains them; the rate runs from its first message to its last.
Each run gets a fresh nsqd with a certificate made for it (trustme) and every message in memory.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.go_tools import rate, start_tool  # noqa: E402
from bench.nsqd_process import cpu_seconds, start_nsqd  # noqa: E402
from common.commands import Mpub  # noqa: E402

MODES = {
    "plain": [],
    "tls": ["--tls"],
    "snappy": ["--snappy"],
    "deflate": ["--deflate"],
    "tls+snappy": ["--tls", "--snappy"],
}
BATCH = 200
SIZE = 200


def certificate_flags(directory: str) -> list[str]:
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(f"{directory}/cert.pem")
    cert.private_key_pem.write_to_path(f"{directory}/key.pem")
    return [f"--tls-cert={directory}/cert.pem", f"--tls-key={directory}/key.pem", "--https-address=127.0.0.1:0",
            "--mem-queue-size=10000000"]


def run_publish(nsqd_flags: list[str], mode_flags: list[str], runfor: str) -> tuple[float, float]:
    proc, address, _ = start_nsqd(*nsqd_flags)
    try:
        out = start_tool("bench_writer.py", f"--nsqd-tcp-address={address}", f"--runfor={runfor}", "--connections=2",
                     f"--size={SIZE}", f"--batch-size={BATCH}", *mode_flags).communicate()[0]
        return rate(out), cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def run_consume(nsqd_flags: list[str], mode_flags: list[str], count: int) -> tuple[float, float]:
    proc, address, _ = start_nsqd(*nsqd_flags)
    try:
        producer = BenchConnection(address)
        batch = Mpub("sub_bench", [b"a" * SIZE] * BATCH).to_bytes()
        for _ in range(count // BATCH):
            producer.send(batch)
            producer.read_response()
        producer.close()
        before = cpu_seconds(proc.pid)
        out = start_tool("bench_reader.py", f"--nsqd-tcp-address={address}", "--runfor=120s", f"--count={count}",
                     *mode_flags).communicate()[0]
        return rate(out), cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait()


def report(name: str, results: list[tuple[float, float]], plain: float | None) -> float:
    rates = [r for r, _ in results]
    median = statistics.median(rates)
    versus = f" = {median / plain:.0%} of plain" if plain else ""
    print(f"{name}: median {median:,.0f} msgs/s{versus} ({', '.join(f'{r:,.0f}' for r in rates)}); "
          f"nsqd CPU s per run: {', '.join(f'{c:.1f}' for _, c in results)}", flush=True)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--count", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsqd-bench-tls-") as directory:
        nsqd_flags = certificate_flags(directory)
        for kind, bench in (("publish", lambda flags: run_publish(nsqd_flags, flags, args.runfor)),
                            ("consume", lambda flags: run_consume(nsqd_flags, flags, args.count))):
            plain = None
            for mode, flags in MODES.items():
                median = report(f"{kind} {mode}", [bench(flags) for _ in range(args.runs)], plain)
                plain = plain or median


if __name__ == "__main__":
    main()
