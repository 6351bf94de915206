"""The Python client library's throughput against this project's nsqd, beside pynsq's on the same load.

    python bench/bench_client.py [--runs=3] [--count=500000] [--clients=nsqclient-asyncio,nsqclient-trio,pynsq]

publish: one client process publishes --count 200-byte messages in MPUB batches of 200 over one
         connection, with 4 batches in flight (pynsq: 4 mpub callbacks outstanding).
consume: --count messages are loaded into the topic first, then one client process consumes them
         with max_in_flight 2500 and FIN for each; the rate runs from its first message to its last.
Each run gets a fresh nsqd keeping every message in memory. Printed: median msgs/s over --runs,
the client's CPU seconds per million messages (its own process), and nsqd's CPU seconds per run.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, start_nsqd  # noqa: E402
from common.client_v2 import encode_mpub  # noqa: E402

TOPIC = "client_bench"
SIZE = 200
BATCH = 200
IN_FLIGHT_BATCHES = 64
MAX_IN_FLIGHT = 2500
CLIENTS = ("nsqclient-asyncio", "nsqclient-trio", "pynsq")
NSQD_FLAGS = ("--mem-queue-size=100000000",)


# -- workers: one per process, print {"seconds": ..., "cpu": ...} ------------------------------

def nsqclient_publish(backend: str, address: str, count: int) -> dict:
    import anyio

    from nsqclient import Producer

    bodies = [b"a" * SIZE] * BATCH
    batches = count // BATCH

    async def main():
        async with Producer(address) as producer:
            await producer.connect()
            remaining = [batches]

            async def publisher():
                while remaining[0] > 0:
                    remaining[0] -= 1
                    await producer.multi_publish(TOPIC, bodies)

            async with anyio.create_task_group() as task_group:
                for _ in range(IN_FLIGHT_BATCHES):
                    task_group.start_soon(publisher)

    return timed(lambda: anyio.run(main, backend=backend))


def nsqclient_consume(backend: str, address: str, count: int) -> dict:
    import anyio

    from nsqclient import Consumer

    seen = {"n": 0, "first": 0.0, "last": 0.0}

    async def main():
        done = anyio.Event()

        async def handler(message):
            n = seen["n"] = seen["n"] + 1
            if n == 1:
                seen["first"] = time.perf_counter()
            if n == count:
                seen["last"] = time.perf_counter()
                done.set()

        async with Consumer(TOPIC, "ch", handler, nsqd_tcp_addresses=[address], max_in_flight=MAX_IN_FLIGHT):
            await done.wait()

    return first_to_last(lambda: anyio.run(main, backend=backend), seen)


def pynsq_publish(address: str, count: int) -> dict:
    import nsq
    import tornado.ioloop

    loop = tornado.ioloop.IOLoop.current()
    bodies = [b"a" * SIZE] * BATCH
    state = {"sent": 0, "answered": 0}
    writer = nsq.Writer([address])

    def publish_one():
        state["sent"] += 1
        writer.mpub(TOPIC, bodies, callback=answered)

    def answered(conn, data):
        if isinstance(data, nsq.Error):
            raise RuntimeError(f"pynsq publish failed: {data}")
        state["answered"] += 1
        if state["answered"] == count // BATCH:
            loop.stop()
        elif state["sent"] < count // BATCH:
            publish_one()

    def start():
        if not writer.conns:
            loop.call_later(0.05, start)
            return
        for _ in range(IN_FLIGHT_BATCHES):
            publish_one()

    loop.call_later(0.05, start)
    return timed(loop.start)


def pynsq_consume(address: str, count: int) -> dict:
    import nsq
    import tornado.ioloop

    loop = tornado.ioloop.IOLoop.current()
    seen = {"n": 0, "first": 0.0, "last": 0.0}

    def handler(message):
        n = seen["n"] = seen["n"] + 1
        if n == 1:
            seen["first"] = time.perf_counter()
        if n == count:
            seen["last"] = time.perf_counter()
            loop.add_callback(loop.stop)
        return True

    nsq.Reader(topic=TOPIC, channel="ch", message_handler=handler, nsqd_tcp_addresses=[address],
               max_in_flight=MAX_IN_FLIGHT)
    return first_to_last(loop.start, seen)


def timed(work) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return {"seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def first_to_last(work, seen: dict) -> dict:
    cpu = time.process_time()
    work()
    return {"seconds": seen["last"] - seen["first"], "cpu": time.process_time() - cpu}


def worker(args) -> None:
    client, _, backend = args.client.partition("-")
    if client == "pynsq":
        result = (pynsq_publish if args.worker == "publish" else pynsq_consume)(args.address, args.count)
    else:
        result = (nsqclient_publish if args.worker == "publish" else nsqclient_consume)(backend, args.address,
                                                                                         args.count)
    print(json.dumps(result))


# -- the benchmark ------------------------------------------------------------------------------

def run_worker(kind: str, client: str, address: str, count: int) -> dict:
    out = subprocess.run([sys.executable, __file__, f"--worker={kind}", f"--client={client}", f"--address={address}",
                          f"--count={count}"], capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"{client} {kind} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def preload(address: str, count: int) -> None:
    conn = BenchConnection(address)
    batch = encode_mpub(TOPIC, [b"a" * SIZE] * BATCH)
    for _ in range(count // BATCH):
        conn.send(batch)
        conn.read_response()
    conn.close()


def one_run(kind: str, client: str, count: int) -> tuple[dict, float]:
    proc, address, _ = start_nsqd(*NSQD_FLAGS)
    try:
        if kind == "consume":
            preload(address, count)
        before = cpu_seconds(proc.pid)
        result = run_worker(kind, client, address, count)
        return result, cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait()


def report(kind: str, client: str, runs: list[tuple[dict, float]], count: int) -> None:
    rates = [count / result["seconds"] for result, _ in runs]
    cpu_per_million = [result["cpu"] * 1e6 / count for result, _ in runs]
    print(f"{kind:7} {client:17} median {statistics.median(rates):>9,.0f} msgs/s "
          f"({', '.join(f'{r:,.0f}' for r in rates)}); client CPU s per million msgs: median "
          f"{statistics.median(cpu_per_million):.2f}; nsqd CPU s per run: "
          f"{', '.join(f'{nsqd_cpu:.1f}' for _, nsqd_cpu in runs)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=500_000, help="messages per run (a multiple of 200)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated, of {', '.join(CLIENTS)}")
    parser.add_argument("--kinds", default="publish,consume")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    for kind in args.kinds.split(","):
        for client in args.clients.split(","):
            report(kind, client, [one_run(kind, client, args.count) for _ in range(args.runs)], args.count)


if __name__ == "__main__":
    main()
