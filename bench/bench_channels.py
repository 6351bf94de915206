"""One topic, 10 channels, every channel consumed while one writer publishes.

    python bench/bench_channels.py [--runs=3] [--runfor=10s] [--channels=10]

Each run starts a fresh nsqd with default flags and creates the channels (a SUB that
leaves), then bench_writer (1 connection, MPUB batches of 200 x 200 bytes) and one
bench_reader per channel (1 connection, RDY 2500, FIN each, NSQ's flush rule) start at
the same deadline. Printed: the messages delivered per channel per second (the slowest
channel of each run, and the median of the runs), the publish rate, and nsqd's CPU
seconds per million messages delivered.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import go_tools  # noqa: E402
from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, running_nsqd  # noqa: E402
from bench.report import figure  # noqa: E402
from common.commands import Sub  # noqa: E402

TOPIC = "channels_bench"


def create_channels(address: str, names: list[str]) -> None:
    for name in names:
        conn = BenchConnection(address)
        conn.send(Sub(TOPIC, name).to_bytes())
        conn.read_response()
        conn.close()


def one_run(runfor: str, channels: int) -> tuple[list[float], float, float]:
    """Each channel's delivered msgs/s, the publish rate, nsqd CPU s per million delivered."""
    names = [f"ch{index}" for index in range(channels)]
    with running_nsqd() as (proc, address):
        create_channels(address, names)
        before = cpu_seconds(proc.pid)
        deadline = go_tools.deadline_in(1)
        common = (f"--nsqd-tcp-address={address}", f"--topic={TOPIC}", f"--runfor={runfor}", f"--deadline={deadline}")
        readers = [go_tools.start_tool("bench_reader.py", *common, f"--channel={name}") for name in names]
        writer = go_tools.start_tool("bench_writer.py", *common)
        published = go_tools.rate(go_tools.finish(writer))
        outputs = [go_tools.finish(reader) for reader in readers]
        delivered = sum(go_tools.messages(out) for out in outputs)
        return [go_tools.rate(out) for out in outputs], published, (cpu_seconds(proc.pid) - before) * 1e6 / delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--channels", type=int, default=10)
    args = parser.parse_args()
    runs = [one_run(args.runfor, args.channels) for _ in range(args.runs)]
    published = statistics.median(p for _, p, _ in runs)
    print(figure(f"{args.channels} channels, slowest channel", "msgs/s delivered per channel",
                 [min(rates) for rates, _, _ in runs], [cpu for _, _, cpu in runs],
                 f"; published: median {published:,.0f} msgs/s"), flush=True)


if __name__ == "__main__":
    main()
