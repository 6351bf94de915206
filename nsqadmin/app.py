"""nsqadmin's Starlette app: the pages, the JSON API, /config and the static files, under --base-path.

Routes are NSQ's (nsqadmin/http.go), each joined to the base path the way Go's
path.Join does; the pages also take the POSTs of their own forms. Answers are
compressed when the client accepts it (NSQ's CompressHandler), every request is logged,
and cross-site changes are refused before any route sees them (guard.py).
"""

import logging
import posixpath
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from serving.starlette_v1 import response, routing_error, v1_app
from serving.v1 import error_parts

from .api import AdminAPI
from .guard import SAFE_METHODS, is_cross_site
from .pages import Pages
from .peek import Peek
from .tail import LiveTail

log = logging.getLogger("nsqadmin")

STATIC_DIR = Path(__file__).resolve().parent / "static"


def join(base: str, path: str) -> str:
    """Go's path.Join(base, path): ``/`` + ``/topics`` -> ``/topics``, ``/admin`` + ``/`` -> ``/admin``."""
    return posixpath.normpath(posixpath.join(base, path.lstrip("/"))).replace("//", "/")


class CrossSiteGuard:
    """Refuse state-changing requests that a browser says come from another site (403 FORBIDDEN)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS and is_cross_site(Request(scope)):
            headers = dict((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
            log.warning("refused cross-site %s %s (Origin: %s, Sec-Fetch-Site: %s)", scope["method"], scope["path"],
                        headers.get("origin", "-"), headers.get("sec-fetch-site", "-"))
            await response(error_parts(403, "FORBIDDEN"))(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def ping(request: Request) -> Response:
    return PlainTextResponse("OK")


def build_app(admin):
    opts = admin.opts
    api = AdminAPI(admin)
    pages = Pages(admin)
    tail = LiveTail(admin)
    peek = Peek(admin)
    table = [
        ("GET", "/ping", ping),
        ("GET", "/", pages.topics),
        ("GET", "/topics", pages.topics),
        ("GET", "/topics/{topic}", pages.topic),
        ("POST", "/topics/{topic}", pages.topic_form),
        ("GET", "/topics/{topic}/{channel}", pages.channel),
        ("POST", "/topics/{topic}/{channel}", pages.channel_form),
        ("GET", "/nodes", pages.nodes),
        ("GET", "/nodes/{node}", pages.node),
        ("POST", "/nodes/{node}", pages.node_form),
        ("GET", "/counter", pages.counter),
        ("GET", "/lookup", pages.lookup),
        ("POST", "/lookup", pages.lookup_form),
        ("GET", "/api/topics", api.topics),
        ("GET", "/api/topics/{topic}", api.topic),
        ("GET", "/api/topics/{topic}/{channel}", api.channel),
        ("GET", "/api/nodes", api.nodes),
        ("GET", "/api/nodes/{node}", api.node),
        ("POST", "/api/topics", api.create_topic_channel),
        ("POST", "/api/topics/{topic}", api.topic_action),
        ("POST", "/api/topics/{topic}/{channel}", api.channel_action),
        ("DELETE", "/api/nodes/{node}", api.tombstone_node_for_topic),
        ("POST", "/api/nodes/{node}", api.node_action),
        ("DELETE", "/api/topics/{topic}", api.delete_topic),
        ("DELETE", "/api/topics/{topic}/{channel}", api.delete_channel),
        ("GET", "/api/counter", api.counter),
        ("GET", "/api/graphite", api.graphite),
        ("GET", "/api/rollups", api.rollups),
        ("GET", "/api/health", api.health),
        ("GET", "/api/tail/{topic}", tail.stream),
        ("GET", "/api/peek/{topic}/{channel}", peek.channel),
        ("GET", "/config/{opt}", api.config),
        ("PUT", "/config/{opt}", api.config),
    ]
    if opts.proxy_graphite:
        table.append(("GET", "/render", pages.graphite_proxy))
    table = [(method, join(opts.base_path, path), endpoint) for method, path, endpoint in table]
    if opts.base_path != "/":
        table.append(("GET", opts.base_path + "/", pages.topics))

    static_prefix = join(opts.base_path, "/static") + "/"

    async def not_found(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404 and request.url.path.startswith(static_prefix):
            return PlainTextResponse("NOT_FOUND", 404)  # NSQ's asset handler answers in plain text
        if exc.status_code == 404 and request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return pages.not_found(request)
        return await routing_error(request, exc)

    app = v1_app(table, log, exception_handlers={HTTPException: not_found},
                 middleware=[Middleware(CrossSiteGuard), Middleware(GZipMiddleware, minimum_size=1024)])
    static = StaticFiles(directory=opts.dev_static_dir or STATIC_DIR)
    app.router.routes.append(Mount(join(opts.base_path, "/static"), app=static, name="static"))
    return app
