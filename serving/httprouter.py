"""How NSQ's daemons route a request: julienschmidt/httprouter v1.3 as NSQ sets it up, sans-IO.

Given the routes (method, pattern; a ``:name`` segment matches any one non-empty segment), a
request gets one of:

* :class:`Found`: the route, and its parameters.
* :class:`Redirect`: when no route of the request's method matches but one would with the
  trailing slash added or removed, or with the path cleaned (``//``, ``.``, ``..``) and matched
  case-insensitively: 301 for GET, 307 for the other methods (the method is kept), to the fixed
  path with the query string. Not for CONNECT, ``/``, or a method no route has.
* :class:`Allowed`: an OPTIONS request to a path some other method's route matches; answered
  200 with ``Allow`` and no body.
* :class:`MethodNotAllowed`: the path matches routes of other methods only; NSQ answers 405
  ``METHOD_NOT_ALLOWED`` with ``Allow``.
* :class:`NotFound`.

``Allow`` lists the other methods whose routes match the path, and OPTIONS, sorted.
:func:`redirect_parts` is Go's http.Redirect answer.
"""

import posixpath
from typing import NamedTuple


class Found(NamedTuple):
    pattern: str
    params: dict[str, str]


class Redirect(NamedTuple):
    location: str
    status: int


class Allowed(NamedTuple):
    allow: str


class MethodNotAllowed(NamedTuple):
    allow: str


class NotFound(NamedTuple):
    pass


def _segments(path: str) -> list[str]:
    return path.split("/")


def _match(pattern: list[str], segments: list[str], fold: bool = False) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params = {}
    for expected, given in zip(pattern, segments):
        if expected.startswith(":"):
            if not given:
                return None
            params[expected[1:]] = given
        elif expected != given and not (fold and expected.lower() == given.lower()):
            return None
    return params


def clean_path(path: str) -> str:
    """httprouter's CleanPath: one slash between segments, no ``.`` or ``..``, the trailing
    slash kept."""
    if not path:
        return "/"
    cleaned = posixpath.normpath("/" + path)
    if cleaned.startswith("//"):
        cleaned = cleaned[1:]
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


class Router:
    def __init__(self, routes):
        """``routes``: (method, pattern) pairs."""
        self.routes: dict[str, list[tuple[str, list[str]]]] = {}
        for method, pattern in routes:
            self.routes.setdefault(method, []).append((pattern, _segments(pattern)))

    def _find(self, method: str, path: str) -> Found | None:
        segments = _segments(path)
        for pattern, pattern_segments in self.routes.get(method, ()):
            params = _match(pattern_segments, segments)
            if params is not None:
                return Found(pattern, params)
        return None

    def _fixed_path(self, method: str, path: str) -> str | None:
        """The path a route of ``method`` matches case-insensitively, trailing slash fixed too."""
        candidates = [path, path[:-1] if path.endswith("/") and len(path) > 1 else path + "/"]
        for candidate in candidates:
            segments = _segments(candidate)
            for _, pattern_segments in self.routes.get(method, ()):
                if _match(pattern_segments, segments, fold=True) is not None:
                    return "/".join(given if expected.startswith(":") else expected
                                    for expected, given in zip(pattern_segments, segments))
        return None

    def allowed(self, method: str, path: str) -> str:
        methods = [other for other in self.routes if other not in (method, "OPTIONS") and self._find(other, path)]
        return ", ".join(sorted([*methods, "OPTIONS"])) if methods else ""

    def route(self, method: str, path: str, query: str = ""):
        found = self._find(method, path)
        if found is not None:
            return found
        if method in self.routes and method != "CONNECT" and path != "/":
            status = 301 if method == "GET" else 307
            toggled = path[:-1] if path.endswith("/") else path + "/"
            if len(path) > 1 and self._find(method, toggled):
                fixed = toggled
            else:
                fixed = self._fixed_path(method, clean_path(path))
            if fixed is not None:
                return Redirect(fixed + (f"?{query}" if query else ""), status)
        allow = self.allowed(method, path)
        if allow:
            return Allowed(allow) if method == "OPTIONS" else MethodNotAllowed(allow)
        return NotFound()


def redirect_parts(redirect: Redirect, method: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Go's http.Redirect: Location; for GET and HEAD an HTML type, for GET a link as the body."""
    headers = [("Location", redirect.location)]
    if method not in ("GET", "HEAD"):
        return redirect.status, b"", headers
    headers.append(("Content-Type", "text/html; charset=utf-8"))
    if method == "HEAD":
        return redirect.status, b"", headers
    link = f'<a href="{_go_html_escape(redirect.location)}">Moved Permanently</a>.\n\n'
    return redirect.status, link.encode(), headers


def _go_html_escape(text: str) -> str:
    for char, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&#34;"), ("'", "&#39;")):
        text = text.replace(char, entity)
    return text
