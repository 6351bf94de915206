"""A real auth server for nsqd's AUTH and --http-auth-required (NSQ v1.3's internal/auth/authorizations.go), on an
ephemeral loopback port: it records every request nsqd makes and answers each secret as told."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

EVERYTHING = {"ttl": 3600, "identity": "alice", "identity_url": "https://auth.example/alice",
              "authorizations": [{"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}]}
ORDERS_ONLY = {"ttl": 3600, "identity": "bob", "authorizations": [
    {"permissions": ["publish"], "topic": "^orders$", "channels": [".*"]},
    {"permissions": ["subscribe"], "topic": "^orders$", "channels": ["^billing$"]}]}


class AuthServer:
    """An auth server on 127.0.0.1: ``answers[secret]`` is (status, JSON-able body, delay in s)."""

    def __init__(self):
        self.answers: dict[str, tuple[int, object, float]] = {}
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._answer(parse_qs(urlsplit(self.path).query, keep_blank_values=True), b"")

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self._answer(json.loads(body), body)

            def _answer(self, values: dict, body: bytes) -> None:
                server.requests.append({"method": self.command, "path": self.path, "values": values, "body": body,
                                        "headers": dict(self.headers)})
                status, answer, delay = server.answers.get(values["secret"][0], (403, {"message": "NO"}, 0))
                time.sleep(delay)  # deliberate: a slow auth server, when asked to be one
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def auth_server():
    server = AuthServer()
    server.answers["good"] = (200, EVERYTHING, 0)
    server.answers["orders"] = (200, ORDERS_ONLY, 0)
    yield server
    server.close()


