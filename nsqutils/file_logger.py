"""One topic archived by nsq_to_file: its consumer and its output file
(apps/nsq_to_file/file_logger.go, the router).

Theory of operation:

* Messages are handled one at a time, in arrival order: each body is written with a newline,
  and the message is kept in flight, not finished.
* A sync puts what was written on disk (:meth:`.OutputFile.sync`) and only then finishes the
  messages kept: nsqd forgets a message once it is on disk, never before. Syncs happen when
  ``--max-in-flight`` messages are kept, when the consumer is starved (nsqd would send no
  more before some are finished), when the file rotates, every ``--sync-interval``, on
  SIGHUP (which also closes the file; the next message opens a new one) and on stop.
* Every ``--sync-interval`` a rotation that is due opens the next file, or, with
  ``--skip-empty-files``, only closes the current one, so no empty file is left.
* Stop: what is kept is synced and finished, the consumer stops (no more messages; any
  still on their way are written and synced at once), then the file is closed (and moved
  out of the work dir).
* A file that cannot be written stops everything: the error is logged as FATAL, nothing more
  is finished (nsqd redelivers what was in flight) and nsq_to_file exits 1.
"""

import logging
from typing import Callable

import anyio

from nsqclient import Consumer, Message

from .output_file import OutputFile


class FileLogger:
    def __init__(self, output: OutputFile, max_in_flight: int, sync_interval: float, skip_empty_files: bool,
                 log: logging.Logger, on_fatal: Callable[[], None]):
        self.output = output
        self.max_in_flight = max_in_flight
        self.sync_interval = sync_interval
        self.skip_empty_files = skip_empty_files
        self.log = log
        self.on_fatal = on_fatal
        self.consumer: Consumer | None = None
        self.kept: list[Message] = []
        self.stopping = False
        self.failed = False

    async def __call__(self, message: Message) -> None:
        message.disable_auto_response()
        if self.failed:
            return
        self._guarded(self._write, message)

    def _write(self, message: Message) -> None:
        rotated = self.output.needs_rotation()
        if rotated:
            self.output.update_file()
        self.output.write(message.body + b"\n")
        self.kept.append(message)
        if rotated or self.stopping or len(self.kept) >= self.max_in_flight or self.consumer.is_starved():
            self._sync()

    def _sync(self) -> None:
        if not self.kept:
            return
        self.log.info("%s syncing %d records to disk", self.output.where, len(self.kept))
        self.output.sync()
        for message in self.kept:
            message.finish()
        self.kept.clear()

    def _on_tick(self) -> None:
        if self.output.needs_rotation():
            if self.skip_empty_files:
                self._sync()
                self.output.close()
                return
            self.output.update_file()
        self._sync()

    def hup(self) -> None:
        """SIGHUP: sync and close; the next message opens a file again."""
        self._guarded(self._sync_and_close)

    def _sync_and_close(self) -> None:
        self._sync()
        self.output.close()

    def stop(self) -> None:
        self.stopping = True
        self._guarded(self._sync)
        self.consumer.stop()

    def _guarded(self, action: Callable, *args) -> None:
        if self.failed:
            return
        try:
            action(*args)
        except OSError as exc:
            self.failed = True
            self.log.critical("%s %s", self.output.where, exc)
            self.on_fatal()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Tick every sync interval until the consumer has stopped; then the last sync and close."""
        task_status.started()
        while True:
            with anyio.move_on_after(self.sync_interval) as tick:
                await self.consumer.wait_stopped()
            if not tick.cancel_called:
                break
            if not self.stopping:
                self._guarded(self._on_tick)
        self._guarded(self._sync_and_close)
