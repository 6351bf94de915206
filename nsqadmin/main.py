"""``nsqadmin`` command: flags, logging, signals, run."""

import sys

from serving.daemon import run_main, serve_with_asyncio

from .nsqadmin import NSQAdmin
from .options import FLAGS, load_options

# What stops nsqadmin from starting: a port in use, an address it cannot listen on, TLS
# files that cannot be read.
STARTUP_ERRORS = (OSError, ValueError)


def main(argv: list[str] | None = None) -> int:
    return run_main("nsqadmin", FLAGS, load_options, NSQAdmin, STARTUP_ERRORS, argv, serve=serve_with_asyncio)


if __name__ == "__main__":
    sys.exit(main())
