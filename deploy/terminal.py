"""Ctrl-C in a terminal goes to the launcher alone, so that ``make run`` ends with status 0.

A terminal sends Ctrl-C's SIGINT to its whole foreground process group. Under ``make run`` that
group holds make too, and GNU make, once its recipe has ended, kills itself with the SIGINT it got
(printing ``make: *** [Makefile: run] Interrupt``), so the shell would see make fail however
cleanly the cluster stopped. So while the cluster runs, the launcher moves into a process group
of its own and makes it the terminal's foreground group, as a job-control shell does for a job,
and hands the terminal back on the way out. Nothing changes when there is no controlling
terminal, when the launcher runs in the background, or when it is already alone in its group
(started straight from an interactive shell).
"""

import os
import signal
from contextlib import contextmanager


def _shared_foreground_terminal() -> int | None:
    """The controlling terminal, opened, if our process group is its foreground and we do not lead it."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(tty) == os.getpgrp() != os.getpid():
            return tty
    except OSError:
        pass
    os.close(tty)
    return None


def _give_terminal(tty: int, process_group: int) -> None:
    """tcsetpgrp, holding back the SIGTTOU a background group gets for it."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        os.tcsetpgrp(tty, process_group)
    except OSError:  # the group to give it back to is gone: the shell takes the terminal back itself
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextmanager
def terminal_to_ourselves():
    """Inside, the terminal's keys signal this process alone. Ctrl-Z is ignored meanwhile: it would
    stop the launcher while make, still running, keeps the shell waiting."""
    tty = _shared_foreground_terminal()
    if tty is None:
        yield
        return
    previous_group = os.tcgetpgrp(tty)
    previous_tstp = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    os.setpgid(0, 0)
    _give_terminal(tty, os.getpgrp())
    try:
        yield
    finally:
        _give_terminal(tty, previous_group)
        signal.signal(signal.SIGTSTP, previous_tstp)
        os.close(tty)
