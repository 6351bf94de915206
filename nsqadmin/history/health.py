"""A channel's health from its last 1-minute windows, modelled on Kafka Burrow's consumer-lag evaluation.

Theory of operation. Burrow does not judge a consumer by one lag reading but by the trend over a
sliding window of them. Here the readings are the channel's last :data:`HEALTH_WINDOWS` across-nodes
1-minute rollup rows (oldest first): ``depth_last`` is the backlog at the end of each minute,
``finished`` the messages consumers took off the queue, ``clients_last`` and ``paused_last`` the
state at the end of the newest minute. A new channel has fewer windows and is judged on those.

The first rule that matches wins, most specific cause first:

1. ``IDLE``          nothing queued now and nothing published in the windows.
2. ``STALLED``       paused while holding messages: the operator's pause explains everything below.
3. ``NO_CONSUMERS``  holding messages and no client connected in the newest window (this is why
                     nothing is finished, so it comes before the plain stall).
4. ``STALLED``       holding messages, consumers connected, nothing finished in any window
                     (requeues and timeouts are not progress).
5. ``LAGGING``       depth never fell from window to window, ended higher than it began, and
                     consumers did finish messages: they work, but slower than producers publish.
6. ``OK``            consumers keep up.

Rates are messages over the seconds the windows' counter deltas cover, so a partly observed
minute does not dilute them.
"""

OK = "OK"
LAGGING = "LAGGING"
STALLED = "STALLED"
NO_CONSUMERS = "NO_CONSUMERS"
IDLE = "IDLE"
STATUSES = (OK, LAGGING, STALLED, NO_CONSUMERS, IDLE)

HEALTH_WINDOWS = 5


def channel_health(windows: list[dict]) -> tuple[str, str]:
    """(status, reason) of one channel from its across-nodes 1m rollup rows, oldest first.

    Only the last :data:`HEALTH_WINDOWS` rows count."""
    windows = windows[-HEALTH_WINDOWS:]
    if not windows:
        return IDLE, "nothing queued and nothing published yet"
    newest = windows[-1]
    depth = _value(newest, "depth_last")
    clients = _value(newest, "clients_last")
    span = _span(windows)
    if depth == 0 and _total(windows, "messages") == 0:
        return IDLE, f"nothing queued and nothing published in {span}"
    if depth > 0 and newest["paused_last"]:
        return STALLED, f"paused with depth {depth:,}"
    if depth > 0 and clients == 0:
        return NO_CONSUMERS, f"depth {depth:,} and no consumer connected"
    if depth > 0 and _total(windows, "finished") == 0:
        return STALLED, (f"depth {depth:,} with {_count(clients, 'consumer')} connected "
                         f"but nothing finished in {span}{_retries(windows)}")
    if _depth_rising(windows):
        growth = depth - _value(windows[0], "depth_last")
        return LAGGING, (f"depth {depth:,} and rising for {span} (+{growth:,}) "
                         f"while consumers finish {_rate(windows, 'finished'):,.1f} msg/s")
    return OK, f"consumers keep up: {_rate(windows, 'messages'):,.1f} msg/s in, depth {depth:,}"


def _value(window: dict, column: str) -> int:
    return window[column] or 0


def _total(windows: list[dict], column: str) -> int:
    return sum(_value(window, column) for window in windows)


def _rate(windows: list[dict], column: str) -> float:
    """``column`` per second over the time the windows' counter deltas cover."""
    covered = sum(window["covered_seconds"] or 0.0 for window in windows)
    return _total(windows, column) / covered if covered else 0.0


def _depth_rising(windows: list[dict]) -> bool:
    depths = [_value(window, "depth_last") for window in windows]
    return depths[-1] > depths[0] and all(later >= earlier for earlier, later in zip(depths, depths[1:]))


def _span(windows: list[dict]) -> str:
    """The minutes from the oldest window's start to the newest one's end, in words."""
    minutes = int((windows[-1]["ts"] - windows[0]["ts"]).total_seconds() // 60) + 1
    return _count(minutes, "minute")


def _retries(windows: list[dict]) -> str:
    """What consumers did instead of finishing, if anything: '' or ' (40 requeued, 3 timed out)'."""
    parts = [f"{count:,} {label}" for count, label in ((_total(windows, "requeues"), "requeued"),
                                                        (_total(windows, "timeouts"), "timed out")) if count]
    return f" ({', '.join(parts)})" if parts else ""


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"
