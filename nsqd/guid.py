"""Message IDs: NSQ's snowflake-style GUIDs (nsqd/guid.py after nsqd/guid.go).

``((ts - twepoch) << 22) | (node_id << 12) | sequence`` with ``ts = unix_ns >> 20``
(ticks of ~1.05 ms), written as 16 lowercase hex bytes. One factory per nsqd, so IDs are
unique across the whole daemon, not only per topic as in NSQ.
"""

import time

TWEPOCH = 1288834974288
NODE_ID_BITS = 10
SEQUENCE_BITS = 12
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
ID_FORMAT = b"%016x"  # an ID as 16 lowercase hex bytes
# The sequence is an ID's low 12 bits, so its last 3 hex digits: one bytes object each, made once
_SEQUENCE_HEX = [b"%03x" % sequence for sequence in range(SEQUENCE_MASK + 1)]


class GuidFactory:
    def __init__(self, node_id: int, clock_ns=time.time_ns):
        if not 0 <= node_id < (1 << NODE_ID_BITS):
            raise ValueError(f"node id {node_id} out of range [0,1024)")
        self._node = node_id << SEQUENCE_BITS
        self._clock_ns = clock_ns
        self._last_tick = -1
        self._sequence = 0

    def _reserve(self, count: int) -> tuple[int, int]:
        """A tick and the first of ``count`` free sequence numbers in it.

        Where NSQ sleeps when the clock goes back or a tick's 4096 sequences run out,
        this borrows the next tick instead, so IDs stay unique and increasing without
        blocking the event loop.
        """
        tick = self._clock_ns() >> 20
        if tick > self._last_tick:
            self._last_tick, self._sequence = tick, 0
        if self._sequence + count > SEQUENCE_MASK + 1:
            self._last_tick += 1
            self._sequence = 0
        first = self._sequence
        self._sequence += count
        return self._last_tick, first

    def new_id_runs(self, count: int) -> list[tuple[bytes, list[bytes]]]:
        """``count`` fresh IDs as ``ID_FORMAT`` writes them, in increasing order, in runs of
        consecutive ones (one run unless a tick's sequences run out): for each run, the first 13
        hex digits its IDs share (tick and node) and the last 3 of each one (its sequence), so
        that an ID costs no formatting of its own."""
        runs: list[tuple[bytes, list[bytes]]] = []
        while count > 0:
            chunk = min(count, SEQUENCE_MASK + 1)
            tick, first = self._reserve(chunk)
            base = ((tick - TWEPOCH) << (NODE_ID_BITS + SEQUENCE_BITS)) | self._node
            runs.append(((ID_FORMAT % base)[:-3], _SEQUENCE_HEX[first : first + chunk]))
            count -= chunk
        return runs
