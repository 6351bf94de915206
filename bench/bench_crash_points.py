"""Random kill -9 points under a mixed load, for longer than the test suite runs them.

    python bench/bench_crash_points.py --lives=500 [--default-flags] [--seed=N] [--keep=DIR]

Runs tests/crash_points.py's loop (the one tests/test_nsqd_crash_points.py runs for 30 lives):
nsqd with --mem-queue-size=0 --sync-every=1 --persist-deferred (or default flags) under
producers and consumers, killed with -9 at a random moment and restarted on the same data
directory, each crash directory opened by NSQ v1.3.0's nsqd where it is at hand; then one last
life drains everything. Prints what was run and every violation of the README's Guarantees
found, and exits 1 if there was one; with --keep, a run that found one leaves its data
directory and every life's nsqd log (life-N.log) in DIR, to read how it came about.
"""

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crash_points import crash_loop, summary  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lives", type=int, default=500, help="kill -9 points")
    parser.add_argument("--default-flags", action="store_true", help="nsqd's default flags instead")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="where a run with a violation leaves its files")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    with tempfile.TemporaryDirectory(prefix="crash-points-") as data_path:
        started = time.monotonic()
        run = trio.run(crash_loop, Path(data_path) / "data", not args.default_flags, args.lives, seed)
        print(summary(run, time.monotonic() - started))
        found = run.model.violations(final=True)
        if found and args.keep is not None:
            keep(Path(data_path) / "data", run.logs, args.keep)
    print(f"{len(found)} violations")
    for line in found[:100]:
        print("  " + line)
    sys.exit(1 if found else 0)


def keep(data_path: Path, logs: list[str], into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    shutil.copytree(data_path, into / "data", dirs_exist_ok=True)
    for life, text in enumerate(logs, start=1):
        (into / f"life-{life}.log").write_text(text)
    print(f"the data directory and {len(logs)} nsqd logs are in {into}")


if __name__ == "__main__":
    main()
