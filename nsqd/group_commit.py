"""Group commit for --sync-every=1: a publish is answered once an fsync covers its disk writes.

Theory of operation: go-diskqueue answers a Put as soon as the record is written and fsyncs
after it, so with --sync-every=1 an acknowledged message can still be lost by an OS crash or
power loss. Here the disk queues are fsynced in *rounds* (nsqd's sync loop, one at a time):
a round fsyncs every disk queue written since the previous round began. ``upcoming`` is the
round that will cover a write made now: the next one to begin, never one already running,
since that one may have taken its snapshot before the write. A publisher that wrote to disk
waits for that round to complete before its OK goes out, and every publish that arrived
while the previous round ran shares it, so one fsync per queue serves all of them.
``rounds`` counts the completed rounds (the durability epoch).

Messages that stay in memory (up to --mem-queue-size, deferred, or handed straight to a
waiting consumer) are not fsynced and their publishers do not wait, as in NSQ.
"""

import trio


class PublishFailed(Exception):
    """nsqd could not take a publish: it is stopping (``reason`` "exiting"), or a disk queue
    refused the messages (``reason``: the error's text)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class SyncRound:
    """One fsync of every disk queue written since the previous round began."""

    def __init__(self):
        self.error: OSError | None = None
        self._done = trio.Event()

    def complete(self, error: OSError | None) -> None:
        self.error = error
        self._done.set()

    async def wait(self) -> None:
        """Return once the round's fsyncs are done; its OSError if one failed."""
        await self._done.wait()
        if self.error is not None:
            raise self.error


class GroupCommit:
    def __init__(self, enabled: bool):
        self.enabled = enabled  # --sync-every=1: writes must be durable before their OK
        self.writes = 0  # disk queue writes so far
        self.rounds = 0
        self.upcoming = SyncRound()

    def round_after(self, writes: int) -> SyncRound | None:
        """The round a publisher must wait for, ``writes`` having been the count of disk queue
        writes before its messages were stored: None when they wrote nothing to disk or
        writes need not be durable before the answer."""
        return self.upcoming if self.enabled and self.writes != writes else None

    def written(self) -> None:
        self.writes += 1

    def begin_round(self) -> SyncRound:
        """The sync loop takes its snapshot now: writes from here on belong to the next round."""
        current, self.upcoming = self.upcoming, SyncRound()
        return current

    def end_round(self, sync_round: SyncRound, error: OSError | None) -> None:
        self.rounds += 1
        sync_round.complete(error)
