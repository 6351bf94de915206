"""What every daemon's command shares: its config file, its options, and its ``main``.

Each daemon declares its flags (common/goflags.Flag), a validation function and a daemon
class with ``run()`` and ``stop()``; this module reads the TOML config, resolves options
(flag > config > default), prints usage and versions, sets up NSQ-style logging, runs the
daemon until SIGINT/SIGTERM, and turns start-up failures into a message and exit status 1.

nsqd and nsqlookupd run on trio (``run(task_status=...)``, :func:`serve_with_trio`);
nsqadmin runs on asyncio under uvicorn (``async run()``, :func:`serve_with_asyncio`).
"""

import logging
import signal
import sys
import tomllib
from types import SimpleNamespace
from typing import Callable

import trio

from common import VERSION, lg
from common.goflags import Flag, FlagError, GoValue, HelpRequested, parse_args, resolve, usage

from .collector import tune_for_a_daemon
from .logs import nsq_logger


# --log-level, NSQ's lg.LogLevel flag.Value: checked as it is parsed, shown as `value` (default INFO).
LOG_LEVEL = GoValue(lg.parse_level, "INFO")


def config_level(value: str) -> str:
    """The resolved --log-level in lower case. A flag's was checked as it was parsed, so a bad one
    came from the config file, refused in NSQ's words."""
    try:
        return lg.parse_level(str(value))
    except ValueError:
        raise FlagError(f"failed parsing log_level {value}") from None


def read_config(path: str) -> dict:
    """The TOML config file's keys, or {} without one; FlagError if it cannot be used."""
    if not path:
        return {}
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise FlagError(f"failed to load config file {path}: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FlagError(f"failed to load config file {path}: {exc}") from exc


# Flags NSQ's daemons define outside their Options struct: go-options reads no config-file key
# for them (``version = true`` in the file does nothing), and /config does not know them.
NOT_OPTIONS = ("version", "config", "verbose", "worker_id")


def resolved_options(flags: list[Flag], given: dict, config: dict) -> SimpleNamespace:
    resolved = resolve(flags, given, {key: value for key, value in config.items() if key not in NOT_OPTIONS})
    unknown = sorted(resolved.unknown_config_keys + [key for key in config if key in NOT_OPTIONS])
    return SimpleNamespace(**resolved.values, unknown_config_keys=unknown)


def load(flags: list[Flag], validate: Callable, argv: list[str],
         adjust_config: Callable[[dict], dict] = lambda config: config) -> SimpleNamespace:
    """Flags, config file and defaults resolved into validated options, or FlagError.

    With ``--version`` the config file is neither read nor checked: the daemon prints its
    version as soon as the flags parse, as NSQ's do.
    """
    given = parse_args(flags, argv)
    if given.get("version"):
        return resolved_options(flags, given, {})
    opts = resolved_options(flags, given, adjust_config(read_config(given.get("config", ""))))
    validate(opts)
    return opts


def options_with(flags: list[Flag], validate: Callable, overrides: dict) -> SimpleNamespace:
    """Defaults with overrides applied, validated: for embedding a daemon in tests and benchmarks."""
    opts = resolved_options(flags, {}, {})
    for name, value in overrides.items():
        if not hasattr(opts, name):
            raise FlagError(f"unknown option {name}")
        setattr(opts, name, value)
    validate(opts)
    return opts


def option_value(flags: list[Flag], opts, option: str):
    """An option by its config-file name, as NSQ's ``GET /config/:opt`` shows it (durations
    in ns, the log level as lg.LogLevel's number); None if the daemon has no such option."""
    for flag in flags:
        if flag.key == option and flag.key not in NOT_OPTIONS:
            value = getattr(opts, flag.attr)
            if flag.attr == "log_level":
                return list(lg.LEVELS).index(value) + 1
            if flag.kind == "duration":
                return round(value * 1e9)
            if isinstance(value, list):
                # Go writes a float64 without a fraction when it has none (1, not 1.0)
                return [int(item) if isinstance(item, float) and item.is_integer() else item for item in value]
            return value
    return None


async def _serve_until_signalled(make_daemon: Callable, opts, log: logging.Logger) -> None:
    """Run the daemon until a signal stops it, or it stops by itself (a drained nsqd). A
    daemon with ``signalled(name)`` decides whether a signal stops it (nsqd's --sigterm)."""
    daemon = make_daemon(opts)

    async def run_daemon(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await daemon.run(task_status=task_status)
        nursery.cancel_scope.cancel()

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_daemon)
            async for signum in signals:
                name = signal.Signals(signum).name
                signalled = getattr(daemon, "signalled", None)
                if signalled is None or signalled(name):
                    log.info("received %s, exiting", name)
                    if signalled is None:
                        daemon.stop()
                    break


def serve_with_trio(make_daemon: Callable, opts, log: logging.Logger) -> None:
    trio.run(_serve_until_signalled, make_daemon, opts, log)


def serve_with_asyncio(make_daemon: Callable, opts, log: logging.Logger) -> None:
    # asyncio is imported here, not at the top: nsqd and nsqlookupd run on trio, and it is a
    # quarter of their start-up imports
    import asyncio

    async def serve_until_signalled() -> None:
        daemon = make_daemon(opts)

        def on_signal(signum: int) -> None:
            log.info("received %s, exiting", signal.Signals(signum).name)
            daemon.stop()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        await daemon.run()

    asyncio.run(serve_until_signalled())


def run_main(program: str, flags: list[Flag], load_options: Callable, make_daemon: Callable,
             startup_errors: tuple, argv: list[str] | None, banner: Callable = lambda opts, log: None,
             serve: Callable = serve_with_trio) -> int:
    """A daemon's ``main``: the exit status (0, or 1 for bad flags and start-up failures)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = load_options(argv)
    except HelpRequested:
        print(usage(program, flags), file=sys.stderr)
        return 0
    except FlagError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return 1
    if opts.version:
        print(f"{program} v{VERSION} (built w/python{sys.version.split()[0]})")
        return 0
    log = nsq_logger(program, opts.log_level, opts.log_prefix)
    nsq_logger("http", opts.log_level, opts.log_prefix)  # serving/: HTTP server and ASGI adapter errors
    for key in opts.unknown_config_keys:
        log.warning("config: ignoring unknown or unsupported key %r", key)
    log.info("%s v%s (python %s)", program, VERSION, sys.version.split()[0])
    banner(opts, log)
    tune_for_a_daemon()
    try:
        serve(make_daemon, opts, log)
    except (OSError, ValueError, ExceptionGroup) as exc:
        errors = _leaves(exc)
        if not all(isinstance(err, startup_errors) for err in errors):
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
