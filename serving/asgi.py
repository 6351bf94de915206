"""Serve an ASGI 3 application (Starlette) with serving.http's HTTPServer.

HTTPServer hands over a whole :class:`Request` and wants a whole :class:`Response`; an
ASGI app talks through ``receive()`` / ``send()``. :class:`ASGIAdapter` translates one
into the other: the scope is built from the request, ``receive()`` yields the body in
one message, and the messages the app sends are collected into the response. Nothing
is streamed: the HTTP APIs here answer with small, whole bodies. This is much cheaper
than hypercorn's trio worker (~1,200 requests/s, measured when the stack was chosen).

Lifespan is optional: :meth:`ASGIAdapter.startup` runs the app's ``lifespan.startup``
if the app has one; an app that raises on (or ignores) the lifespan scope is served
without it, as the ASGI spec asks of servers.
"""

import logging
from urllib.parse import unquote

import trio

from .http import Request, Response

log = logging.getLogger("http")

ASGI_VERSION = {"version": "3.0", "spec_version": "2.4"}
SHUTDOWN_TIMEOUT = 5.0
_DROPPED_HEADERS = (b"content-length", b"transfer-encoding")  # HTTPServer frames the body itself
_INTERNAL_ERROR = Response(500, b"Internal Server Error", [("Content-Type", "text/plain; charset=utf-8")])


class ASGIProtocolError(RuntimeError):
    """The app sent ASGI messages out of order."""


def _client(remote_address: str) -> tuple[str, int] | None:
    host, _, port = remote_address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class _Exchange:
    """One request/response cycle: the app's ``receive`` and ``send``."""

    __slots__ = ("body", "body_sent", "status", "headers", "chunks", "complete", "_done")

    def __init__(self, body: bytes):
        self.body = body
        self.body_sent = False
        self.status: int | None = None
        self.headers: list = []
        self.chunks: list[bytes] = []
        self.complete = False
        self._done: trio.Event | None = None

    async def receive(self) -> dict:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        # After the body, receive() waits for the "disconnect": the end of this exchange.
        if not self.complete:
            if self._done is None:
                self._done = trio.Event()
            await self._done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.status is not None:
                raise ASGIProtocolError("http.response.start sent twice")
            self.status = message["status"]
            self.headers = message.get("headers", ())
        elif kind == "http.response.body":
            if self.status is None:
                raise ASGIProtocolError("http.response.body before http.response.start")
            if self.complete:
                raise ASGIProtocolError("http.response.body after the response was complete")
            body = message.get("body", b"")
            if body:
                self.chunks.append(body)
            if not message.get("more_body", False):
                self.complete = True
                if self._done is not None:
                    self._done.set()
        else:
            raise ASGIProtocolError(f"unexpected ASGI message {kind!r}")


class ASGIAdapter:
    """An HTTPServer handler that runs an ASGI app: ``HTTPServer(ASGIAdapter(app), ...)``."""

    def __init__(self, app, *, server: tuple[str, int] | None = None):
        self.app = app
        self.server = server
        self._lifespan: _Lifespan | None = None

    async def __call__(self, request: Request) -> Response:
        path = request.path
        scope = {
            "type": "http",
            "asgi": ASGI_VERSION,
            "http_version": "1.1",
            "method": request.method,
            "scheme": "http",
            "path": unquote(path) if "%" in path else path,
            "raw_path": path.encode("latin-1", "replace"),
            "query_string": request.query.encode("latin-1", "replace"),
            "root_path": "",
            "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in request.headers.items()],
            "client": _client(request.remote_address),
            "server": self.server,
        }
        if self._lifespan is not None and self._lifespan.state is not None:
            scope["state"] = dict(self._lifespan.state)
        exchange = _Exchange(request.body)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception:
            # Starlette re-raises after sending its error page, for the server to log.
            log.exception("ASGI app failed on %s %s", request.method, path)
            if not exchange.complete:
                return _INTERNAL_ERROR
        if not exchange.complete:
            log.error("ASGI app returned without a complete response to %s %s", request.method, path)
            return _INTERNAL_ERROR
        headers = [(name.decode("latin-1"), value.decode("latin-1"))
                   for name, value in exchange.headers if name.lower() not in _DROPPED_HEADERS]
        return Response(exchange.status, b"".join(exchange.chunks), headers)

    # -- lifespan -----------------------------------------------------------------------

    async def startup(self, nursery: trio.Nursery) -> None:
        """Run the app's lifespan startup in ``nursery``; raise if the app reports failure."""
        self._lifespan = _Lifespan(self.app)
        await nursery.start(self._lifespan.run)
        if self._lifespan.startup_failed is not None:
            raise RuntimeError(f"ASGI lifespan startup failed: {self._lifespan.startup_failed}")

    async def shutdown(self) -> None:
        """Ask the app to shut down and wait (bounded) until it has."""
        if self._lifespan is not None:
            await self._lifespan.shutdown()


class _Lifespan:
    def __init__(self, app):
        self.app = app
        self.supported = False
        self.startup_failed: str | None = None
        self.state: dict | None = None  # what the app put in the lifespan state, once started
        self._scope_state: dict = {}
        self._startup_sent = False
        self._ready = False
        self._task_status = trio.TASK_STATUS_IGNORED
        self._shutdown = trio.Event()
        self._finished = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._task_status = task_status
        scope = {"type": "lifespan", "asgi": ASGI_VERSION, "state": self._scope_state}
        try:
            await self.app(scope, self._receive, self._send)
        except Exception:
            if self._ready:
                log.exception("ASGI lifespan failed")
            else:
                log.debug("ASGI app without lifespan support", exc_info=True)
        finally:
            self._finished.set()
            self._mark_ready()

    def _mark_ready(self) -> None:
        if not self._ready:
            self._ready = True
            self._task_status.started()

    async def _receive(self) -> dict:
        if not self._startup_sent:
            self._startup_sent = True
            return {"type": "lifespan.startup"}
        await self._shutdown.wait()
        return {"type": "lifespan.shutdown"}

    async def _send(self, message: dict) -> None:
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self.supported = True
            self.state = self._scope_state
            self._mark_ready()
        elif kind == "lifespan.startup.failed":
            self.startup_failed = message.get("message", "")
            self._mark_ready()
        elif kind == "lifespan.shutdown.failed":
            # Also sent when the app's lifespan task is cancelled without a shutdown request.
            level = logging.ERROR if self._shutdown.is_set() else logging.DEBUG
            log.log(level, "ASGI lifespan shutdown failed: %s", message.get("message", ""))
        elif kind != "lifespan.shutdown.complete":
            raise ASGIProtocolError(f"unexpected ASGI message {kind!r}")

    async def shutdown(self) -> None:
        if not self.supported:
            return
        self._shutdown.set()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(SHUTDOWN_TIMEOUT):
                await self._finished.wait()
