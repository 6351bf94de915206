"""serving/httprouter.py: NSQ's routing answers (httprouter v1.3 as NSQ sets it up), pinned here
without Go; tests/test_differential_nsqd_http.py checks them against NSQ's nsqd itself."""

import pytest

from serving.httprouter import Allowed, Found, MethodNotAllowed, NotFound, Redirect, Router, clean_path, redirect_parts

ROUTER = Router([("GET", "/ping"), ("POST", "/pub"), ("GET", "/stats"), ("GET", "/config/:opt"),
                 ("PUT", "/config/:opt"), ("GET", "/debug/pprof/")])


@pytest.mark.parametrize("method,path,expected", [
    ("GET", "/ping", Found("/ping", {})),
    ("GET", "/config/log_level", Found("/config/:opt", {"opt": "log_level"})),
    ("PUT", "/config/x", Found("/config/:opt", {"opt": "x"})),
    ("GET", "/ping/", Redirect("/ping", 301)),
    ("POST", "/pub/", Redirect("/pub", 307)),
    ("GET", "/debug/pprof", Redirect("/debug/pprof/", 301)),
    ("GET", "/PING", Redirect("/ping", 301)),
    ("GET", "/Ping/", Redirect("/ping", 301)),
    ("GET", "/x/../ping", Redirect("/ping", 301)),
    ("GET", "/CONFIG/Log_Level", Redirect("/config/Log_Level", 301)),
    ("POST", "/ping", MethodNotAllowed("GET, OPTIONS")),
    ("HEAD", "/ping", MethodNotAllowed("GET, OPTIONS")),  # no implicit HEAD, and no redirect for it
    ("DELETE", "/config/x", MethodNotAllowed("GET, OPTIONS, PUT")),
    ("OPTIONS", "/config/x", Allowed("GET, OPTIONS, PUT")),
    ("OPTIONS", "/nope", NotFound()),
    ("GET", "/config/", NotFound()),
    ("GET", "/config/a/b", NotFound()),
    ("GET", "/", NotFound()),
    ("PATCH", "/ping/", NotFound()),  # no PATCH route: no redirect, and /ping/ matches nothing
])
def test_route(method, path, expected):
    assert ROUTER.route(method, path) == expected


def test_a_redirect_keeps_the_query():
    assert ROUTER.route("POST", "/PUB", "topic=t&x=1") == Redirect("/pub?topic=t&x=1", 307)


@pytest.mark.parametrize("path,cleaned", [("", "/"), ("//ping", "/ping"), ("/a/./b/", "/a/b/"), ("/a/../../b", "/b")])
def test_clean_path(path, cleaned):
    assert clean_path(path) == cleaned


def test_redirect_answers_as_go_http_redirect():
    assert redirect_parts(Redirect('/a?b="c"&d', 301), "GET") == (
        301, b'<a href="/a?b=&#34;c&#34;&amp;d">Moved Permanently</a>.\n\n',
        [("Location", '/a?b="c"&d'), ("Content-Type", "text/html; charset=utf-8")])
    assert redirect_parts(Redirect("/a", 301), "HEAD") == (301, b"", [("Location", "/a"),
                                                                     ("Content-Type", "text/html; charset=utf-8")])
    assert redirect_parts(Redirect("/a", 307), "POST") == (307, b"", [("Location", "/a")])
