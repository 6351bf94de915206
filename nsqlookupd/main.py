"""``nsqlookupd`` command: flags, logging, signals, run."""

import logging
import signal
import sys

import trio

from common import VERSION, lg
from common.goflags import FlagError, usage

from .nsqlookupd import NSQLookupd
from .options import FLAGS, load_options

# What stops nsqlookupd from starting: a port in use, an address it cannot listen on.
STARTUP_ERRORS = (OSError, ValueError)


async def serve_until_signalled(opts) -> None:
    lookupd = NSQLookupd(opts)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(lookupd.run)
            async for signum in signals:
                logging.getLogger("nsqlookupd").info("received %s, exiting", signal.Signals(signum).name)
                lookupd.stop()
                break


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg.lstrip("-") in ("h", "help") for arg in argv):
        print(usage("nsqlookupd", FLAGS), file=sys.stderr)
        return 0
    try:
        opts = load_options(argv)
    except FlagError as exc:
        print(f"nsqlookupd: {exc}", file=sys.stderr)
        return 1
    if opts.version:
        print(f"nsqlookupd v{VERSION} (built w/python{sys.version.split()[0]})")
        return 0
    log = lg.setup("nsqlookupd", opts.log_level, opts.log_prefix)
    lg.setup("http", opts.log_level, opts.log_prefix)  # serving/: HTTP server and ASGI adapter errors
    for key in opts.unknown_config_keys:
        log.warning("config: ignoring unknown or unsupported key %r", key)
    log.info("nsqlookupd v%s (python %s)", VERSION, sys.version.split()[0])
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
