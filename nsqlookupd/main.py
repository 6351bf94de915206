"""``nsqlookupd`` command: flags, logging, signals, run."""

import sys

from serving.daemon import run_main

from .nsqlookupd import NSQLookupd
from .options import FLAGS, load_options

# What stops nsqlookupd from starting: a port in use, an address it cannot listen on.
STARTUP_ERRORS = (OSError, ValueError)


def main(argv: list[str] | None = None) -> int:
    return run_main("nsqlookupd", FLAGS, load_options, NSQLookupd, STARTUP_ERRORS, argv)


if __name__ == "__main__":
    sys.exit(main())
