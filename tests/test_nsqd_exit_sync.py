"""A graceful stop syncs every disk queue in worker threads, and nsqd exits only once they are
all on disk (nsqd/nsqd.py's _run_exit_syncs)."""

import os
import threading

import trio

from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .datadir import bodies, create_channel, meta_file, parse_meta, publish

TOPICS = 12


async def test_a_graceful_stop_syncs_every_queue_off_the_event_loop(tmp_path, monkeypatch):
    loop_thread = threading.current_thread()
    on_loop, elsewhere = [], []
    real_fsync = os.fsync

    def recorded_fsync(fd: int) -> None:
        (on_loop if threading.current_thread() is loop_thread else elsewhere).append(fd)
        real_fsync(fd)

    async with trio.open_nursery() as nursery:
        nsqd = NSQD(default_options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path)))
        await nursery.start(nsqd.run)
        for number in range(TOPICS):
            for channel in ("a", "b"):
                await create_channel(nsqd.tcp_port, f"t{number}", channel)
            await publish(nsqd.tcp_port, f"t{number}", bodies("m", number + 1))  # in memory, to disk at the stop
        monkeypatch.setattr(os, "fsync", recorded_fsync)
        nsqd.stop()

    for number in range(TOPICS):
        for channel in ("a", "b"):
            depth, _, _ = parse_meta(meta_file(tmp_path, f"t{number}:{channel}"))
            assert depth == number + 1
        assert parse_meta(meta_file(tmp_path, f"t{number}"))[0] == 0
    assert len(elsewhere) >= 3 * TOPICS  # each queue's data and metadata
    assert len(on_loop) <= 2, f"{len(on_loop)} fsyncs on the event loop"  # nsqd.dat's file and directory at most
