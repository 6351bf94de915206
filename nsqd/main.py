"""``nsqd`` command: flags, logging, signals, run."""

import logging
import signal
import sys

import trio

from common import VERSION
from common import lg
from common.goflags import FlagError, usage

from .dirlock import DirLockError
from .nsqd import NSQD
from .options import FLAGS, load_options

# What stops nsqd from starting: a locked or unreadable data directory, a port in use,
# a corrupt nsqd.dat.
STARTUP_ERRORS = (DirLockError, OSError, ValueError)


async def serve_until_signalled(opts) -> None:
    nsqd = NSQD(opts)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(nsqd.run)
            async for signum in signals:
                logging.getLogger("nsqd").info("received %s, exiting", signal.Signals(signum).name)
                nsqd.stop()
                break


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg.lstrip("-") in ("h", "help") for arg in argv):
        print(usage("nsqd", FLAGS), file=sys.stderr)
        return 0
    try:
        opts = load_options(argv)
    except FlagError as exc:
        print(f"nsqd: {exc}", file=sys.stderr)
        return 1
    if opts.version:
        print(f"nsqd v{VERSION} (built w/python{sys.version.split()[0]})")
        return 0
    log = lg.setup("nsqd", opts.log_level, opts.log_prefix)
    for key in opts.unknown_config_keys:
        log.warning("config: ignoring unknown or unsupported key %r", key)
    log.info("nsqd v%s (python %s)", VERSION, sys.version.split()[0])
    log.info("ID: %d", opts.node_id)
    try:
        trio.run(serve_until_signalled, opts)
    except (OSError, ValueError, ExceptionGroup) as exc:
        errors = _leaves(exc)
        if not all(isinstance(err, STARTUP_ERRORS) for err in errors):
            raise
        for err in errors:
            log.critical("%s", err)
        return 1
    return 0


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


if __name__ == "__main__":
    sys.exit(main())
