"""The daemon: its upstream client, its Starlette app, and uvicorn serving it (nsqadmin/nsqadmin.go).

``run`` binds the HTTP address itself (so a port in use is a start-up error with NSQ's
exit status, not uvicorn's), serves the app with uvicorn on asyncio until ``stop()``,
then lets notifications still on the way finish and closes the upstream client.

Beside uvicorn run the stats history's recorder (--stats-interval, ``recorder``) and the
supervisor of the rollup worker process (--rollup-interval, ``scheduler``); each is None when
turned off, or when the history is off (``history.off`` says why: history/availability.py).
At stop both end before ``run`` returns: the recorder writes its last rows, the worker is
stopped.
"""

import asyncio
import logging
import os
import socket
from pathlib import Path

import uvicorn

from clusterinfo.cluster import ClusterInfo
from clusterinfo.upstream import Upstream, client_ssl_context
from serving.listeners import format_address, listen_error, parse_address
from serving.logs import nsq_logger

from .actions import Operator
from .app import build_app
from .history.access import HistoryAccess
from .history.availability import off_reason
from .notify import Notifier
from .options import allowed_config_network

log = logging.getLogger("nsqadmin")

GRACEFUL_SHUTDOWN_SECONDS = 5


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: serving/daemon.py owns SIGINT and SIGTERM."""

    def capture_signals(self):
        return _NoSignals()


class _NoSignals:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


def bind(address: str) -> socket.socket:
    """A listening socket for ``host:port`` or a unix socket path; OSError if it cannot listen."""
    parsed = parse_address(address, "--http-address")
    try:
        if isinstance(parsed, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(parsed)
        else:
            host, port = parsed
            info = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            # The protocol must be given: asyncio sets TCP_NODELAY only on sockets it knows are TCP, and
            # without it Nagle holds uvicorn's body behind its headers until the client's delayed ACK (~40 ms).
            sock = socket.socket(info[0], socket.SOCK_STREAM, info[2])
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(info[4])
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        raise listen_error(address, "--http-address", exc) from exc
    sock.setblocking(False)
    return sock


def prepare_stats_dir(path: str) -> None:
    """Create --stats-dir and check that nsqadmin can write in it; OSError saying why if not."""
    directory = Path(path)
    probe = directory / f".probe.{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        why = exc.strerror.lower() if exc.strerror else exc
        raise OSError(f"--stats-dir: cannot write to {path} - {why}") from exc


class NSQAdmin:
    def __init__(self, opts):
        self.opts = opts
        self.config_network = allowed_config_network(opts.allow_config_from_cidr)
        ssl_context = None
        if opts.http_client_tls_insecure_skip_verify or opts.http_client_tls_root_ca_file or opts.http_client_tls_cert:
            try:
                ssl_context = client_ssl_context(opts.http_client_tls_insecure_skip_verify,
                                                 opts.http_client_tls_root_ca_file, opts.http_client_tls_cert,
                                                 opts.http_client_tls_key)
            except OSError as exc:  # ssl.SSLError included
                why = exc.strerror.lower() if exc.strerror else exc
                raise OSError(f"--http-client-tls-*: cannot use the TLS files given - {why}") from exc
        self.upstream = Upstream(opts.http_client_connect_timeout, opts.http_client_request_timeout, ssl_context)
        self.ci = ClusterInfo(self.upstream, opts, log)
        self.notifier = Notifier(opts.notification_http_endpoint, self.upstream)
        self.operator = Operator(self.ci, self.notifier)
        self.history = HistoryAccess(opts.stats_dir, off_reason(opts), log)
        self.recorder = self.scheduler = None
        if self.history.off is None:
            self._start_history(ssl_context)
        self.http_port = 0
        self._server: _Server | None = None
        self._stopping = False

    def _start_history(self, ssl_context) -> None:
        """The recorder and the rollup worker's supervisor, as their intervals ask. Their modules need the
        history extra, so they are imported here, with the history on, not with this module."""
        from .history.raw_writer import RawWriter
        from .history.recorder import Recorder, flush_seconds
        from .history.scheduler import RollupWorker
        from .history.stats_fetcher import StatsFetcher
        opts = self.opts
        if opts.stats_interval or opts.rollup_interval:
            prepare_stats_dir(opts.stats_dir)
        if opts.stats_interval:
            fetcher = StatsFetcher(opts.http_client_connect_timeout, opts.http_client_request_timeout, ssl_context,
                                   opts.nsqd_auth_secret)
            self.recorder = Recorder(self.ci, fetcher, RawWriter(opts.stats_dir), opts.stats_interval,
                                     flush_seconds(opts.stats_interval))
        if opts.rollup_interval:
            self.scheduler = RollupWorker(opts)

    async def run(self) -> None:
        """Serve until ``stop()``."""
        sock = bind(self.opts.http_address)
        name = sock.getsockname()
        self.http_port = name[1] if isinstance(name, tuple) else -1
        log.info("HTTP: listening on %s", format_address(name))
        if self.history.off:
            log.warning("stats history off: %s", self.history.off)
        config = uvicorn.Config(build_app(self), log_config=None, access_log=False, lifespan="off",
                                http="httptools", server_header=False,
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
        nsq_logger("uvicorn.error", "warn" if self.opts.log_level in ("debug", "info") else self.opts.log_level,
                 self.opts.log_prefix)
        self._server = _Server(config)
        self._server.should_exit = self._stopping
        history = [part for part in (self.recorder, self.scheduler) if part is not None]
        for part in history:
            part.start()
        try:
            await self._server.serve(sockets=[sock])
        finally:
            log.info("HTTP: closing %s", format_address(name))
            await asyncio.gather(*(part.stop() for part in history))
            await self.notifier.drain()
            await self.upstream.aclose()
        log.info("NSQ: bye")

    def stop(self) -> None:
        self._stopping = True
        if self.scheduler is not None:
            self.scheduler.close()
        if self._server is not None:
            self._server.should_exit = True
