"""How every utility runs: its async body on anyio (asyncio backend, as nsqadmin's cluster
queries need), SIGINT/SIGTERM delivered to a graceful stop, :class:`~.golog.Fatal` turned
into NSQ's ``log.Fatal`` (the message on stderr, exit status 1)."""

import signal
import sys
from typing import Awaitable, Callable

import anyio

from . import golog

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _fatal_in(exc: BaseException) -> golog.Fatal | None:
    """The Fatal inside ``exc`` (possibly nested in exception groups), if that is all it holds."""
    if isinstance(exc, golog.Fatal):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _fatal_in(exc.exceptions[0])
    return None


def run(body: Callable[..., Awaitable[int | None]], *args) -> int:
    """Run ``body(*args)``: the exit status it returns (0 for None), 1 on Fatal, 130 on an early Ctrl-C."""
    try:
        return anyio.run(body, *args, backend="asyncio") or 0
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        fatal = _fatal_in(exc)
        if fatal is None:
            raise
        return fatal_exit(str(fatal))


def fatal_exit(message: str) -> int:
    """log.Fatal's output; the exit status to return."""
    golog.printf(message)
    return 1


async def watch_signals(on_signal: Callable[[int], None], signums=STOP_SIGNALS, *,
                        task_status=anyio.TASK_STATUS_IGNORED) -> None:
    """Call ``on_signal(signum)`` for every signal received, until cancelled."""
    with anyio.open_signal_receiver(*signums) as received:
        task_status.started()
        async for signum in received:
            on_signal(signum)


def die_on_broken_stdout() -> None:
    """A closed stdout pipe ends the process, as Go's runtime does (``nsq_tail | head``)."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def write_stdout(data: bytes) -> None:
    """Unbuffered, as Go's os.Stdout is: each line reaches the reader at once."""
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
