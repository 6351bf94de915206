"""Discovering a topic's nsqd through nsqlookupd (go-nsq consumer.go lookupdLoop / queryLookupd).

Theory of operation:

* Each query asks one nsqlookupd, taking them in turn, for ``/lookup?topic=<topic>``; on an
  error it tries the next one, three tries in all. Every producer listed becomes
  ``broadcast_address:tcp_port``, handed to the Consumer, which connects to those it has no
  connection to yet.
* The first query runs at once. The loop then waits a random part of
  ``lookupd_poll_jitter x lookupd_poll_interval`` (so consumers restarted together do not
  query together) and queries every ``lookupd_poll_interval``, and also as soon as the
  Consumer asks (a connection closed: is that nsqd still there, or is there another?).
* A lookupd that does not answer only costs a logged error: connections already made stay.
* The HTTP client is the event loop's, shared by every consumer on it (:mod:`.lookupd_http`);
  each request carries this consumer's headers and lookupd_poll_timeout.
"""

import logging
import random
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import httpx

from .config import Config
from .lookupd_http import lookupd_http_client

log = logging.getLogger("nsqclient")

ACCEPT = "application/vnd.nsq; version=1.0"
TRIES = 3


def lookup_url(address: str, topic: str) -> str:
    """go-nsq's buildLookupAddr: ``http://`` if no scheme, path ``/lookup`` if none, ``topic`` added."""
    url = address if "://" in address else "http://" + address
    parts = urlsplit(url)
    if parts.port is None:
        raise ValueError(f"nsqlookupd address {address!r} is missing a port")
    path = "/lookup" if parts.path in ("", "/") else parts.path
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("topic", topic)])
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def producer_addresses(answer: dict) -> list[str]:
    """``host:port`` of every nsqd in a /lookup answer (v1, or the old ``data``-wrapped form)."""
    data = answer.get("data", answer) if "producers" not in answer else answer
    addresses = []
    for producer in data.get("producers") or []:
        host = producer["broadcast_address"]
        host = f"[{host}]" if ":" in host else host
        addresses.append(f"{host}:{producer['tcp_port']}")
    return addresses


class LookupdPoller:
    def __init__(self, topic: str, config: Config, on_producers, rng: random.Random):
        self.topic = topic
        self.config = config
        self.endpoints: list[str] = []
        self._on_producers = on_producers
        self._rng = rng
        self._next = 0
        self._recheck = anyio.Event()
        self._client: httpx.AsyncClient | None = None
        self._headers: dict[str, str] = {}

    def add(self, address: str) -> bool:
        """Poll this nsqlookupd too; False if it was already polled."""
        url = lookup_url(address, self.topic)
        if url in self.endpoints:
            return False
        self.endpoints.append(url)
        return True

    def __contains__(self, address: str) -> bool:
        return lookup_url(address, self.topic) in self.endpoints

    def remove(self, address: str) -> None:
        """Poll this nsqlookupd no more; ValueError if it was not polled."""
        self.endpoints.remove(lookup_url(address, self.topic))

    def recheck(self) -> None:
        """Query again now."""
        self._recheck.set()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """First query, ready, then poll until cancelled."""
        config = self.config
        self._headers = {"Accept": ACCEPT}
        if config.auth_secret and config.skip_lookupd_authorization:
            self._headers["Authorization"] = f"Bearer {config.auth_secret}"
        async with lookupd_http_client() as client:
            self._client = client
            await self.query()
            task_status.started()
            await anyio.sleep(self._rng.random() * config.lookupd_poll_jitter * config.lookupd_poll_interval)
            while True:
                with anyio.move_on_after(config.lookupd_poll_interval):
                    await self._recheck.wait()
                self._recheck = anyio.Event()
                await self.query()

    async def query(self) -> None:
        """Ask the next nsqlookupd (up to three of them, on errors) and report its producers."""
        for _ in range(TRIES):
            if not self.endpoints:
                return
            endpoint = self.endpoints[self._next % len(self.endpoints)]
            self._next = (self._next + 1) % len(self.endpoints)
            log.info("querying nsqlookupd %s", endpoint)
            try:
                response = await self._client.get(endpoint, headers=self._headers,
                                                  timeout=self.config.lookupd_poll_timeout)
                if response.status_code != 200:
                    raise ValueError(f"got response {response.status_code} {response.text.strip()!r}")
                addresses = producer_addresses(response.json())
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
                log.error("error querying nsqlookupd (%s) - %s", endpoint, exc)
                continue
            await self._on_producers(addresses)
            return
