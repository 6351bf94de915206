"""serving/asgi.py: ASGI apps (plain and Starlette) behind serving.http's HTTPServer."""

import contextlib

import httpx
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from serving.asgi import ASGIAdapter
from serving.http import HTTPServer, Request


def request(method="GET", path="/", query="", body=b"", headers=None, remote="127.0.0.1:5555") -> Request:
    return Request(method, path, query, headers or {"host": "x"}, body, remote)


async def echo_scope(scope, receive, send):
    """A plain ASGI app with no lifespan support: it refuses any other scope type."""
    if scope["type"] != "http":
        raise RuntimeError("no lifespan here")
    message = await receive()
    seen = {key: scope[key] for key in ("method", "path", "raw_path", "query_string", "client", "server",
                                        "http_version", "scheme", "root_path")}
    seen["headers"] = [[k.decode(), v.decode()] for k, v in scope["headers"]]
    seen["body"] = message["body"].decode()
    seen["more_body"] = message["more_body"]
    seen = repr(seen).encode()
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"999"), (b"x-a", b"1")]})
    await send({"type": "http.response.body", "body": seen[:10], "more_body": True})
    await send({"type": "http.response.body", "body": seen[10:]})


@pytest.fixture
async def serve(nursery):
    """Serve an adapter on a loopback port; yields an httpx client factory."""
    stack = contextlib.AsyncExitStack()

    async def start(adapter: ASGIAdapter) -> httpx.AsyncClient:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await adapter.startup(nursery)
        await nursery.start(HTTPServer(adapter, max_body_size=1024).serve, listeners)
        port = listeners[0].socket.getsockname()[1]
        return await stack.enter_async_context(httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}"))

    async with stack:
        yield start


async def test_scope_body_and_response_through_the_server(serve):
    client = await serve(ASGIAdapter(echo_scope, server=("127.0.0.1", 80)))  # no lifespan: served anyway
    response = await client.post("/a%20b/c?x=1&y=%20", content=b"hello", headers={"X-Test": "yes"})
    assert response.status_code == 201
    assert response.headers["content-length"] == str(len(response.content))  # the app's 999 is dropped
    assert response.headers["x-a"] == "1"
    seen = eval(response.text)  # noqa: S307 - our own repr
    assert seen["method"] == "POST"
    assert (seen["path"], seen["raw_path"], seen["query_string"]) == ("/a b/c", b"/a%20b/c", b"x=1&y=%20")
    assert seen["client"][0] == "127.0.0.1" and seen["server"] == ("127.0.0.1", 80)
    assert (seen["http_version"], seen["scheme"], seen["root_path"]) == ("1.1", "http", "")
    assert ["x-test", "yes"] in seen["headers"]
    assert (seen["body"], seen["more_body"]) == ("hello", False)


async def test_starlette_lifespan_runs_around_serving(serve):
    events = []

    @contextlib.asynccontextmanager
    async def lifespan(app):
        events.append("startup")
        yield {"greeting": "hi"}
        events.append("shutdown")

    async def hello(request):
        return JSONResponse({"state": request.state.greeting})

    adapter = ASGIAdapter(Starlette(routes=[Route("/", hello)], lifespan=lifespan))
    client = await serve(adapter)
    assert events == ["startup"]
    assert (await client.get("/")).json() == {"state": "hi"}
    await adapter.shutdown()
    assert events == ["startup", "shutdown"]


async def test_lifespan_startup_failure_is_raised(nursery):
    @contextlib.asynccontextmanager
    async def lifespan(app):
        raise ValueError("no database")
        yield

    with pytest.raises(RuntimeError, match="ASGI lifespan startup failed"):
        await ASGIAdapter(Starlette(lifespan=lifespan)).startup(nursery)


async def test_app_failures_become_500():
    async def fails(scope, receive, send):
        raise ValueError("boom")

    async def says_nothing(scope, receive, send):
        await send({"type": "http.response.start", "status": 200})

    async def body_first(scope, receive, send):
        await send({"type": "http.response.body", "body": b"x"})

    for app in (fails, says_nothing, body_first):
        response = await ASGIAdapter(app)(request())
        assert (response.status, response.body) == (500, b"Internal Server Error")


async def test_a_complete_response_survives_an_exception_raised_after_it():
    async def error_page(request):
        raise ValueError("boom")

    async def on_error(request, exc):
        return PlainTextResponse("handled", status_code=500)

    # Starlette's ServerErrorMiddleware sends its error page, then re-raises for the server to log.
    app = Starlette(routes=[Route("/", error_page)], exception_handlers={Exception: on_error})
    response = await ASGIAdapter(app)(request())
    assert (response.status, response.body) == (500, b"handled")


async def test_receive_after_the_body_reports_disconnect_once_the_response_is_done():
    async def app(scope, receive, send):
        assert (await receive())["type"] == "http.request"
        async with trio.open_nursery() as nursery:
            got = []

            async def wait_disconnect():
                got.append((await receive())["type"])

            nursery.start_soon(wait_disconnect)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # still waiting: the response is not done
            await send({"type": "http.response.start", "status": 204})
            await send({"type": "http.response.body"})
        assert got == ["http.disconnect"]

    assert (await ASGIAdapter(app)(request())).status == 204


async def test_head_answers_carry_the_length_but_no_body(serve):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200})
        await send({"type": "http.response.body", "body": b"some body"})

    client = await serve(ASGIAdapter(app))
    response = await client.head("/")
    assert (response.status_code, response.headers["content-length"], response.content) == (200, "9", b"")
    assert (await client.get("/")).content == b"some body"
