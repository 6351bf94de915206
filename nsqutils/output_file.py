"""One topic's output file for nsq_to_file (apps/nsq_to_file/file_logger.go, its file half).

Theory of operation:

* The name comes from ``--filename-format`` with ``<TOPIC>``, ``<HOST>`` and ``<PID>`` set
  once (:func:`filename_format`), ``<DATETIME>`` set from the clock at each check, and
  ``<REV>`` as ``-000000``, ``-000001``... It is opened in ``--work-dir`` (``--output-dir``
  unless given), directories made as needed.
* A new file is due (:meth:`OutputFile.needs_rotation`) when none is open, when the
  ``<DATETIME>`` part changed, when ``--rotate-interval`` has passed since it was opened, or
  when more than ``--rotate-size`` bytes (uncompressed, plus what the file held when opened)
  were written. The same name again takes the next revision.
* With gzip, ``--rotate-interval`` or a work dir, a name that exists is never reused (the
  next revision is taken); otherwise the file is appended to, and a file already past
  ``--rotate-size`` is passed over for the next revision.
* With gzip, each :meth:`OutputFile.sync` ends a gzip member and starts another, so the file
  is a valid concatenation of members up to the last sync (what was acknowledged to nsqd).
* :meth:`OutputFile.close` ends the member, fsyncs, closes and, with a work dir, moves the
  file to the output dir by hard link and unlink, so an existing file is never overwritten:
  on a clash the next free revision is taken.

Failures raise OSError; the caller decides (NSQ's logs FATAL and exits 1).
"""

import logging
import os
import socket
import time
import zlib

from common.goflags import format_duration

from .strftime import strftime


def filename_format(opts, topic: str) -> str:
    """``--filename-format`` for one topic; ValueError when ``<REV>`` is needed and missing."""
    hostname = socket.gethostname()
    short_host = hostname.split(".")[0]
    identifier = short_host
    if opts.host_identifier:
        identifier = opts.host_identifier.replace("<SHORT_HOST>", short_host).replace("<HOSTNAME>", hostname)
    name = opts.filename_format
    if opts.gzip or opts.rotate_size > 0 or opts.rotate_interval > 0 or opts.work_dir != opts.output_dir:
        if "<REV>" not in name:
            raise ValueError("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")
    else:
        name = name.replace("<REV>", "")
    name = name.replace("<TOPIC>", topic).replace("<HOST>", identifier).replace("<PID>", str(os.getpid()))
    if opts.gzip and not name.endswith(".gz"):
        name += ".gz"
    return name


def _revision(template: str, rev: int) -> str:
    return template.replace("<REV>", f"-{rev:06d}")


def _gzip_member(level: int):
    return zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)


class OutputFile:
    def __init__(self, opts, topic: str, channel: str, name_format: str, log: logging.Logger):
        self.opts = opts
        self.where = f"[{topic}/{channel}]"
        self.name_format = name_format
        self.log = log
        self.out = None
        self.path = ""
        self.gzip = None
        self.filename = ""  # the current name, <REV> not yet replaced
        self.rev = 0
        self.open_time = 0.0
        self.filesize = 0

    def current_filename(self) -> str:
        return self.name_format.replace("<DATETIME>", strftime(self.opts.datetime_format))

    def needs_rotation(self) -> bool:
        if self.out is None:
            return True
        filename = self.current_filename()
        if filename != self.filename:
            self.log.info("%s new filename %s, rotating...", self.where, filename)
            return True
        if self.opts.rotate_interval > 0:
            elapsed = time.monotonic() - self.open_time
            if elapsed > self.opts.rotate_interval:
                self.log.info("%s %s since last open, rotating...", self.where, format_duration(elapsed))
                return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self.log.info("%s %s currently %d bytes (> %d), rotating...", self.where, self.path, self.filesize,
                          self.opts.rotate_size)
            return True
        return False

    def write(self, data: bytes) -> None:
        self.out.write(self.gzip.compress(data) if self.gzip is not None else data)
        self.filesize += len(data)

    def sync(self) -> None:
        """Everything written so far on disk (a complete gzip member)."""
        if self.gzip is not None:
            self.out.write(self.gzip.flush())
            self.gzip = _gzip_member(self.opts.gzip_level)
        self.out.flush()
        os.fsync(self.out.fileno())

    def close(self) -> None:
        if self.out is None:
            return
        if self.gzip is not None:
            self.out.write(self.gzip.flush())
            self.gzip = None
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        self.out = None
        if self.opts.work_dir != self.opts.output_dir:
            self._move_to_output_dir()

    def update_file(self) -> None:
        """Close the current file and open the one now due."""
        self.close()
        filename = self.current_filename()
        self.rev = 0 if filename != self.filename else self.rev + 1
        self.filename = filename
        self.open_time = time.monotonic()
        template = os.path.normpath(os.path.join(self.opts.work_dir, filename))
        os.makedirs(os.path.dirname(template) or ".", 0o770, exist_ok=True)
        while not self._open_revision(template):
            self.rev += 1
        self.gzip = _gzip_member(self.opts.gzip_level) if self.opts.gzip else None

    def _open_revision(self, template: str) -> bool:
        """Open revision ``self.rev`` if it can be used."""
        path = _revision(template, self.rev)
        if self.opts.work_dir != self.opts.output_dir:
            final = self._output_path(path)
            os.makedirs(os.path.dirname(final) or ".", 0o770, exist_ok=True)
            if os.path.exists(final):
                self.log.warning("%s output file already exists: %s", self.where, final)
                return False
        exclusive = self.opts.gzip or self.opts.rotate_interval > 0
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            self.log.warning("%s working file already exists: %s", self.where, path)
            return False
        self.out, self.path = os.fdopen(fd, "ab"), path
        self.log.info("%s opening %s", self.where, path)
        self.filesize = os.fstat(fd).st_size
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self.log.info("%s %s currently %d bytes (> %d), rotating...", self.where, path, self.filesize,
                          self.opts.rotate_size)
            self.out.close()
            self.out = None
            return False
        return True

    def _output_path(self, work_path: str) -> str:
        relative = os.path.relpath(work_path, os.path.normpath(self.opts.work_dir))
        return os.path.normpath(os.path.join(self.opts.output_dir, relative))

    def _move_to_output_dir(self) -> None:
        src = self.path
        dst = self._output_path(src)
        self.log.info("%s moving finished file %s to %s", self.where, src, dst)
        rev = self.rev
        while True:
            try:
                os.link(src, dst)
                break
            except FileExistsError:
                self.log.warning("%s destination file already exists: %s", self.where, dst)
                rev += 1
                dst = _revision(os.path.join(os.path.dirname(dst), os.path.basename(self.filename)), rev)
        os.remove(src)
        if dst != self._output_path(src):
            self.log.info("%s renamed finished file %s to %s to avoid overwrite", self.where, src, dst)
