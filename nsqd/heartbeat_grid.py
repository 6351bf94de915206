"""When a heartbeat goes: on a grid of a sixty-fourth of its interval, so idle connections share wake-ups.

nsqd (nsqd/protocol_v2.go, the messagePump's heartbeat ticker) sends each client ``_heartbeat_``
every heartbeat interval from when it started to pump. Here a heartbeat due at ``due`` goes at
the grid point at or before it: the latest multiple of ``interval / GRID`` on trio's clock. So
the first goes at most a sixty-fourth of the interval early (0.47 s of NSQ's default 30 s), and
each is due again one interval after it went, put on the grid the same way: one sent at its grid
point (or after it, within a step) is due again exactly ``interval`` on, the grid point ``GRID``
steps on, so a connection's heartbeats then come ``interval`` apart, as NSQ's ticker's do. The
heartbeat task may take one up to its SLACK (20 ms, nsqd/heartbeats.py) before its grid point,
with a round due just before it; the next then comes a step sooner. Never later: a client is
never sent them further apart than its interval. Its read deadline (two intervals of silence,
then it is closed) is not on the grid, and is exact.

Why: every connection whose heartbeat falls in one step of the grid goes in one round of nsqd's
heartbeat task (nsqd/heartbeats.py), so thousands of idle consumers that connected at scattered
times make at most ``GRID`` rounds an interval, and their NOP answers arrive together, instead of
a wake-up of nsqd's every few heartbeats. A wake-up is dear where it finds the machine's caches
cold (a trio round after a 20 ms sleep measured ~320 µs of CPU against ~7 µs back to back, on
the project's 2-core VM): it was most of an idle nsqd's CPU with 5,000 consumers.
"""

import math

GRID = 64  # steps an interval: how early a first heartbeat may go, at most
ON_POINT = 1e-6  # of a step: a time this close below a grid point is on it (float rounding)


def heartbeat_time(due: float, interval: float) -> float:
    """When a heartbeat due at ``due`` goes: the latest grid point at or before it. Every
    connection of one interval due in the same step gets the same float, so they share a
    deadline in the scheduler (nsqd/wake_scheduler.py). A heartbeat sent at a grid point is due
    again at ``interval`` on, which float arithmetic may put a hair below the point ``GRID``
    steps on: that counts as on it, or each heartbeat would go a step earlier than the last."""
    step = interval / GRID
    return math.floor(due / step + ON_POINT) * step
