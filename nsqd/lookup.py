"""nsqd's side of discovery: its set of nsqlookupd peers (nsqd/lookup.go).

The set comes from --lookupd-tcp-address and changes at run time through
``PUT /config/nsqlookupd_tcp_addresses``. Topic and channel changes are forwarded to
every peer. Before a new topic starts handing messages to its channels, nsqd asks the
connected lookupds which channels that topic has elsewhere in the cluster
(``GET /channels``, all at once, as nsqd's GetTopic through clusterinfo) and creates the
non-ephemeral ones, so no channel misses the topic's first messages; the command that
created the topic is answered after that (nsqd.get_started_topic).

The queries share one HTTP client for as long as nsqd runs, made in a worker thread when
the first lookupd address is set: a new httpx client costs ~20 ms of CPU (its TLS
context), which a client per query spent on the event loop at every topic creation. httpx is
imported there too, so an nsqd without lookupds never loads it (a fifth of its start-up time).
"""

import gc
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import trio

from common.names import is_ephemeral
from common.protocol_v1 import Register, Unregister

from .lookup_peer import LookupPeer, command_text, dial_error_text

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("nsqd")


def join_host_port(host: str, port) -> str:
    """Go's net.JoinHostPort: an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _query_error_text(exc: Exception) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError):
        url = exc.request.url
        return dial_error_text(join_host_port(url.host, url.port), exc)
    return str(exc) or type(exc).__name__


class Lookup:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.peers: dict[str, LookupPeer] = {}
        self._http: httpx.AsyncClient | None = None
        self._http_made = trio.Event()
        self._http_wanted = False

    def set_addresses(self, addresses: list[str]) -> None:
        """Start peers for new addresses, stop the ones no longer listed."""
        for address in list(self.peers):
            if address not in addresses:
                log.info("LOOKUP(%s): removing peer", address)
                self.peers.pop(address).stop()
        for address in addresses:
            if address not in self.peers:
                log.info("LOOKUP(%s): adding peer", address)
                peer = LookupPeer(address, self.nsqd)
                self.peers[address] = peer
                self.nsqd.spawn(peer.run)
        if addresses and not self._http_wanted:
            self._http_wanted = True
            self.nsqd.spawn(self._keep_http_client)

    def connected(self) -> bool:
        """Whether any lookupd is connected (and so can be asked about channels)."""
        return any(peer.info for peer in self.peers.values())

    def notify(self, command: Register | Unregister) -> None:
        """Forward a registration change to every peer, logged per peer as nsqd's lookupLoop does;
        a draining nsqd registers nothing (nsqd/drain.py)."""
        if self.nsqd.draining and isinstance(command, Register):
            return
        branch = "channel" if command.channel else "topic"
        for peer in self.peers.values():
            log.info("LOOKUPD(%s): %s %s", peer.address, branch, command_text(command))
            peer.command(command)

    async def _keep_http_client(self) -> None:
        """Make the lookupd queries' client off the event loop; close it when nsqd stops."""
        client = await trio.to_thread.run_sync(self._new_http_client)
        # httpx's modules (~17,000 objects) live as long as nsqd, as what nsqd.dat loaded: out of every
        # collection too. Imported while a work in slices held the collector, they made its first young
        # collection after a 10-30 ms pause.
        gc.freeze()
        self._http = client
        self._http_made.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()

    def _new_http_client(self) -> "httpx.AsyncClient":
        import httpx

        opts = self.nsqd.opts
        timeout = httpx.Timeout(opts.http_client_request_timeout, connect=opts.http_client_connect_timeout)
        return httpx.AsyncClient(timeout=timeout)

    async def cluster_channels(self, topic: str) -> list[str]:
        """The non-ephemeral channels the connected lookupds know for ``topic``, sorted. The
        lookupds that could not say are named in one warning, as nsqd's GetTopic does."""
        query = urlencode({"topic": topic})
        urls = [f"http://{join_host_port(peer.info['broadcast_address'], peer.info['http_port'])}/channels?{query}"
                for peer in self.peers.values() if peer.info and peer.info.get("broadcast_address")]
        await self._http_made.wait()
        import httpx

        found: set[str] = set()
        errors: list[str] = []

        async def ask(url: str) -> None:
            log.info("CI: querying nsqlookupd %s", url)
            try:
                response = await self._http.get(url)
                response.raise_for_status()
                channels = response.json().get("channels") or []
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                errors.append(f'Get "{url}": {_query_error_text(exc)}')
                return
            found.update(name for name in channels if isinstance(name, str) and not is_ephemeral(name))

        async with trio.open_nursery() as nursery:
            for url in urls:
                nursery.start_soon(ask, url)
        if errors:
            none = "failed to query any nsqlookupd: " if len(errors) == len(urls) else ""
            log.warning("failed to query nsqlookupd for channels to pre-create for topic %s - %s%s",
                        topic, none, "\n".join(errors))
        return sorted(found)

    async def prepare_topic(self, topic) -> None:
        """Create the topic's channels known to the cluster, then start it. A topic deleted
        meanwhile gets no channels, but starts, so whoever waits for it goes on; nor does a
        channel deleted meanwhile (its files may still be in the way)."""
        with trio.move_on_after(self.nsqd.opts.http_client_request_timeout + 1):
            channels = await self.cluster_channels(topic.name)
            if self.nsqd.topics.get(topic.name) is topic:
                for name in channels:
                    if not self.nsqd.removing(topic.name, name):
                        topic.get_channel(name)
        topic.start()
