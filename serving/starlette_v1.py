"""NSQ's V1 HTTP conventions (serving/v1.py) for Starlette apps: nsqlookupd's API and nsqadmin's.

Routing matches NSQ's httprouter (serving/httprouter.py) where a client could notice: no
implicit HEAD, 404 ``NOT_FOUND`` and 405 ``METHOD_NOT_ALLOWED`` (with an ``Allow`` header) as
V1 errors, ``OPTIONS`` answered with ``Allow``, and (where the app asks for them) the redirects.
Every request is logged at INFO, as NSQ's http_api.Log does.
"""

import logging
import re
import time
from typing import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from common.goflags import format_duration

from .httprouter import Allowed, MethodNotAllowed, Redirect, Router, redirect_parts
from .v1 import HTTPError, error_parts, ok_parts, parse_query

RouteTable = list[tuple[str, str, Callable]]


def response(parts, extra_headers: dict[str, str] | None = None) -> Response:
    """A Starlette response from serving.v1's ``(status, body, headers)``."""
    status, body, headers = parts
    headers = dict(headers)
    if extra_headers:
        headers.update(extra_headers)
    return Response(body, status, headers)


def ok(data=None, sort_keys: bool = False) -> Response:
    return response(ok_parts(data, sort_keys=sort_keys))


def query(request: Request) -> dict[str, list[str]]:
    """The query string with Go's url.ParseQuery rules (400 INVALID_REQUEST when it fails)."""
    return parse_query(request.scope["query_string"].decode("latin-1"))


def arg(values: dict[str, list[str]], name: str, missing: str) -> str:
    """http_api.ReqParams.Get: the first value; absent is an error, empty is not."""
    found = values.get(name)
    if found is None:
        raise HTTPError(400, missing)
    return found[0]


def request_uri(scope) -> str:
    uri = scope["raw_path"].decode("latin-1")
    if scope["query_string"]:
        uri += "?" + scope["query_string"].decode("latin-1")
    return uri


def client_address(scope) -> str:
    """The peer in Go's ``host:port`` form (``[::1]:5000``), or "" when unknown."""
    client = scope.get("client")
    if not client:
        return ""
    return f"[{client[0]}]:{client[1]}" if ":" in client[0] else f"{client[0]}:{client[1]}"


class AccessLog:
    """ASGI middleware: one INFO line per request, ``<status> <method> <uri> (<remote>) <elapsed>``."""

    def __init__(self, app, logger: logging.Logger):
        self.app = app
        self.log = logger

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_note_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            self.log.info("%d %s %s (%s) %s", status, scope["method"], request_uri(scope), client_address(scope),
                          format_duration(time.perf_counter() - start))


async def api_error(request: Request, exc: HTTPError) -> Response:
    return response(error_parts(exc.status, exc.text))


async def routing_error(request: Request, exc: HTTPException) -> Response:
    """httprouter's answers where no route of the app (``v1_app``'s table) takes a request
    (serving/httprouter.py): NOT_FOUND, METHOD_NOT_ALLOWED with Allow, OPTIONS with Allow, and
    where the app asks for them the redirects."""
    if exc.status_code not in (404, 405):
        return response(error_parts(exc.status_code, exc.detail))
    state = request.app.state
    route = state.httprouter.route(request.method, request.url.path, request.scope["query_string"].decode("latin-1"))
    if isinstance(route, Redirect) and state.redirects:
        status, body, headers = redirect_parts(route, request.method)
        return Response(body, status, dict(headers))
    if isinstance(route, Allowed):
        return Response(b"", 200, {"Allow": route.allow})
    if isinstance(route, MethodNotAllowed):
        return response(error_parts(405, "METHOD_NOT_ALLOWED"), {"Allow": route.allow})
    return response(error_parts(404, "NOT_FOUND"))


def internal_error_handler(logger: logging.Logger) -> Callable:
    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.error("HTTP: %s %s failed: %r", request.method, request.url.path, exc)
        return response(error_parts(500, "INTERNAL_ERROR"))
    return internal_error


def _by_method(endpoints: dict[str, Callable]) -> Callable:
    async def dispatch(request: Request) -> Response:
        return await endpoints[request.method](request)
    return dispatch


def routes_from(table: RouteTable) -> list[Route]:
    """One route per path, for every method the table gives it (so a 405 names them all),
    without the HEAD Starlette adds to GET."""
    by_path: dict[str, dict[str, Callable]] = {}
    for method, path, endpoint in table:
        by_path.setdefault(path, {})[method] = endpoint
    routes = []
    for path, endpoints in by_path.items():
        endpoint = next(iter(endpoints.values())) if len(endpoints) == 1 else _by_method(endpoints)
        route = Route(path, endpoint, methods=list(endpoints))
        route.methods.discard("HEAD")
        routes.append(route)
    return routes


def v1_app(table: RouteTable, logger: logging.Logger, exception_handlers: dict | None = None,
           middleware: list[Middleware] = (), redirects: bool = False) -> Starlette:
    """A Starlette app answering errors the V1 way, logging every request to ``logger``; with
    ``redirects``, httprouter's redirects (a trailing slash, a path's case) too."""
    handlers = {HTTPError: api_error, HTTPException: routing_error, Exception: internal_error_handler(logger)}
    handlers.update(exception_handlers or {})
    app = Starlette(routes=routes_from(table), middleware=[Middleware(AccessLog, logger=logger), *middleware],
                    exception_handlers=handlers)
    app.router.redirect_slashes = False
    app.state.httprouter = Router((method, re.sub(r"\{(\w+)[^}]*\}", r":\1", path)) for method, path, _ in table)
    app.state.redirects = redirects
    return app
