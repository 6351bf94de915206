"""``nsqd`` command: flags, logging, signals, run."""

import sys

from serving.daemon import run_main

from .dirlock import DirLockError
from .nsqd import NSQD
from .options import FLAGS, load_options

# What stops nsqd from starting: a locked or unreadable data directory, a port in use,
# a corrupt nsqd.dat.
STARTUP_ERRORS = (DirLockError, OSError, ValueError)


def main(argv: list[str] | None = None) -> int:
    return run_main("nsqd", FLAGS, load_options, NSQD, STARTUP_ERRORS, argv,
                    banner=lambda opts, log: log.info("ID: %d", opts.node_id))


if __name__ == "__main__":
    sys.exit(main())
