"""The differential tests' step runner for nsqlookupd (tests/differential_driver.py has nsqd's
and what they share): NSQ's nsqlookupd and ours with the same flags, V1 peers and HTTP requests
sent to both, every reply compared, and the registrations (/debug, /nodes, /topics) after every
step. Every V1 command is answered and every V1 error is fatal, so a step reads as many replies
as it sent commands, or up to the close; after an error, on to the close."""

import time

import httpx
import pytest

from common.protocol_v1 import MAGIC_V1, ResponseReader

from .differential_driver import (ANSWER_TIMEOUT, CLOSE_TIMEOUT, CLOSED, POLL_INTERVAL, SETTLE_TIMEOUT, Connection,
                                  Stalled, compare)
from .differential_normalise import Names, http_lines, json_lines
from .go_nsq import GoLookupdProcess
from .lookupd_helpers import LookupdProcess


class LookupdSide:
    """One nsqlookupd (Go's or ours), its HTTP client and the test's V1 connections to it."""

    def __init__(self, label: str, process_class, flags: tuple[str, ...]):
        self.label = label
        self.process = process_class(*flags)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.process.http_port}", timeout=ANSWER_TIMEOUT)
        self.names = Names()
        self.names.ports.update({self.process.tcp_port: "lookupd-tcp", self.process.http_port: "lookupd-http"})
        self.conns: dict[str, Connection] = {}

    def stop(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.http.close()
        self.process.stop()

    def connect(self, name: str, magic: bytes) -> list[str]:
        conn = self.conns[name] = Connection(name, self.process.tcp_port, ResponseReader())
        self.names.ports[conn.local_port] = name
        conn.send(magic)
        return [] if magic == MAGIC_V1 or len(magic) < len(MAGIC_V1) else self._read_replies(conn, 1)

    def send(self, name: str, data: bytes, replies: int) -> list[str]:
        conn = self.conns[name]
        conn.send(data)
        return self._read_replies(conn, replies)

    def hang_up(self, name: str) -> list[str]:
        """The peer closes its side: nsqlookupd closes too, and forgets the peer's registrations."""
        conn = self.conns[name]
        conn.hang_up()
        lines = self._read_replies(conn, 0, until_closed=True)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while any(f'127.0.0.1:{name}"' in line for line in self.state()):
            if time.monotonic() > deadline:
                if self.label == "go":
                    raise Stalled(f"NSQ's nsqlookupd: {name} still registered after its close")
                return lines + ["STALLED still registered"]
            time.sleep(POLL_INTERVAL)
        return lines

    def _read_replies(self, conn: Connection, count: int, until_closed: bool = False) -> list[str]:
        lines = []
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while len(lines) < count or until_closed:
            reply = conn.reader.next_response()
            if reply is not None:
                text = reply.decode("utf-8", "backslashreplace")
                lines.append(" ".join(json_lines(text, self.names)) if text.startswith("{") else self.names.text(text))
                if text.startswith("E_") and not until_closed:
                    until_closed, deadline = True, min(deadline, time.monotonic() + CLOSE_TIMEOUT)
                continue
            if time.monotonic() >= deadline:
                if until_closed and len(lines) >= count:
                    return lines + ["NOT CLOSED"]
                if self.label == "go":
                    raise Stalled(f"NSQ's nsqlookupd: {conn.name}: no reply")
                return lines + ["STALLED waiting for a reply"]
            if not conn.receive(deadline):
                return lines + [CLOSED]
        return lines

    def request(self, method: str, path: str, body: bytes, headers: dict | None) -> list[str]:
        response = self.http.request(method, path, content=body, headers=headers)
        return http_lines(response.status_code, response.headers, response.content, self.names)

    def state(self) -> list[str]:
        """The registration DB as /debug and /nodes show it."""
        lines = []
        for path in ("/debug", "/nodes", "/topics"):
            lines += [f"{path} {line}" for line in self.request("GET", path, b"", None)]
        return lines


class LookupdPair:
    """NSQ's nsqlookupd and ours, with the same flags, driven step by step."""

    def __init__(self, *flags: str):
        self.flags = flags
        self.diverged = False
        self.go = LookupdSide("go", GoLookupdProcess, flags)
        try:
            self.ours = LookupdSide("ours", LookupdProcess, flags)
        except BaseException:
            self.go.stop()
            raise

    @property
    def sides(self):
        return self.go, self.ours

    def stop(self) -> None:
        for side in self.sides:
            side.stop()

    def restart(self) -> None:
        self.stop()
        self.__init__(*self.flags)

    def _both(self, what: str, run, check: bool) -> list[str]:
        self.diverged = True  # until both have answered alike
        go = compare(what, run(self.go), run(self.ours))
        if check:
            compare(f"registrations after {what}", self.go.state(), self.ours.state())
        self.diverged = False
        return go

    def connect(self, name: str, magic: bytes = MAGIC_V1, check: bool = True) -> list[str]:
        return self._both(f"connect {name}", lambda side: side.connect(name, magic), check)

    def apart(self, name: str, data: bytes, replies: int = 1) -> tuple[list[str], list[str]]:
        """Send to both without comparing, for a difference the README lists; the daemons are
        replaced after the test."""
        self.diverged = True
        return self.go.send(name, data, replies), self.ours.send(name, data, replies)

    def send(self, name: str, data: bytes, replies: int = 1, check: bool = True) -> list[str]:
        return self._both(f"{name} > {data[:200]!r}", lambda side: side.send(name, data, replies), check)

    def hang_up(self, name: str, check: bool = True) -> list[str]:
        return self._both(f"{name} hangs up", lambda side: side.hang_up(name), check)

    def end_test(self) -> None:
        """Between tests: every peer hung up (and the registrations compared), or new daemons
        if the last test left them different."""
        try:
            if not self.diverged:
                for name in sorted(self.go.conns):
                    if not self.go.conns[name].closed or not self.ours.conns[name].closed:
                        self.hang_up(name)
        finally:
            if self.diverged:
                self.restart()
            for side in self.sides:
                side.conns.clear()

    def http(self, method: str, path: str, body: bytes = b"", headers: dict | None = None,
             check: bool = True) -> list[str]:
        return self._both(f"{method} {path} {body[:100]!r}", lambda side: side.request(method, path, body, headers),
                          check)


@pytest.fixture(scope="module")
def lookupd_pair():
    """The daemons live for the module; each test ends with :meth:`LookupdPair.end_test`."""
    started = LookupdPair()
    yield started
    started.stop()
