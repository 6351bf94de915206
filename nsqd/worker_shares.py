"""Many small file jobs at a graceful stop, shared among a few worker threads.

A stop of nsqd with 10,000 topics x 2 channels has tens of thousands of file operations to
do (each disk queue's fsync and metadata, each queue's --persist-deferred files written or
removed). On the event loop they held it for seconds; a worker thread each (trio's
to_thread per job) costs the loop a hand-off per job. Here the jobs are dealt out to a few
threads that each run their share in turn.
"""

from collections.abc import Callable
from typing import TypeVar

import trio

Job = TypeVar("Job")


async def run_in_shares(run: Callable[[Job], None], jobs: list[Job], threads: int) -> list[tuple[Job, OSError]]:
    """``run(job)`` for every job, the jobs dealt out among ``threads`` worker threads; the jobs
    that raised OSError, each with its error."""
    failed: list[tuple[Job, OSError]] = []

    def run_share(share: list[Job]) -> None:
        for job in share:
            try:
                run(job)
            except OSError as exc:
                failed.append((job, exc))

    async with trio.open_nursery() as nursery:
        for first in range(min(threads, len(jobs))):
            nursery.start_soon(trio.to_thread.run_sync, run_share, jobs[first::threads])
    return failed
