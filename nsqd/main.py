"""``nsqd`` command: flags, logging, signals, run."""

import logging
import signal
import sys

import trio

from common import VERSION
from common import lg
from common.goflags import FlagError, usage

from .nsqd import NSQD
from .options import FLAGS, load_options


async def serve_until_signalled(opts) -> None:
    nsqd = NSQD(opts)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(nsqd.run)
            async for signum in signals:
                logging.getLogger("nsqd").info("received %s, exiting", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
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
    except OSError as exc:
        log.critical("failed to listen on %s: %s", opts.tcp_address, exc.strerror or exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
